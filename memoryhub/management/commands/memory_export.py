from django.core.management.base import BaseCommand, CommandError

from memoryhub.errors import MemoryhubError
from memoryhub.management.acting import acting_caller
from memoryhub.management.json_lines import json_lines_write
from memoryhub.services.portability import memory_export_for


class Command(BaseCommand):
    help = ("Write a person's own memory and the receipts of their reads as JSON Lines, exactly what they can "
            "download from My memory (e.g. to answer an access request). The deployment's operator only.")

    def add_arguments(self, parser):
        parser.add_argument("workspace")
        parser.add_argument("username")
        parser.add_argument("--output", default="-", help="The file to write ('-', the default: standard output); "
                                                          "written whole or not at all.")

    def handle(self, *args, workspace, username, output, **options):
        try:
            count = json_lines_write(memory_export_for(caller=acting_caller(workspace), username=username), output,
                                     count="fragment", ascii_only=False)
        except MemoryhubError as exc:
            raise CommandError(exc.message) from exc
        except OSError as exc:
            raise CommandError(f"--output: {exc}") from exc
        if output != "-":
            self.stderr.write(f"Wrote {count} memories of {username} to {output}.")
