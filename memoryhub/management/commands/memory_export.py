import json
import os
import sys

from django.core.management.base import BaseCommand, CommandError

from memoryhub.errors import MemoryhubError
from memoryhub.management.acting import acting_caller
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
        partial = f"{output}.partial"
        try:
            items = memory_export_for(caller=acting_caller(workspace), username=username)
            handle = sys.stdout if output == "-" else os.fdopen(  # noqa: SIM115 - closed below
                os.open(partial, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600), "w", encoding="utf-8")
            try:
                count = 0
                for item in items:
                    handle.write(json.dumps(item, ensure_ascii=False) + "\n")
                    count += item["kind"] == "fragment"
            finally:
                if handle is not sys.stdout:
                    handle.close()
            if output != "-":
                os.replace(partial, output)  # mode 0600: it holds a person's memory or a workspace's reads
        except MemoryhubError as exc:
            raise CommandError(exc.message) from exc
        except OSError as exc:
            raise CommandError(f"--output: {exc}") from exc
        finally:
            if output != "-" and os.path.exists(partial):
                os.unlink(partial)
        if output != "-":
            self.stderr.write(f"Wrote {count} memories of {username} to {output}.")
