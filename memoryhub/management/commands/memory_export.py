import json
import sys

from django.core.management.base import BaseCommand, CommandError

from memoryhub import access
from memoryhub.errors import MemoryhubError
from memoryhub.management.acting import acting_caller, add_acting_argument
from memoryhub.services.members import member_get
from memoryhub.services.portability import memory_export


class Command(BaseCommand):
    help = ("Write a person's own memory and the receipts of their reads as JSON Lines (what they can download "
            "from My memory), e.g. to answer an access request.")

    def add_arguments(self, parser):
        parser.add_argument("workspace")
        parser.add_argument("username")
        parser.add_argument("--output", default="-", help="The file to write ('-', the default: standard output).")
        add_acting_argument(parser)

    def handle(self, *args, workspace, username, output, acting_as, **options):
        try:
            person = member_get(caller=acting_caller(workspace, acting_as), username=username).user
            items = memory_export(caller=access.caller_for_user(user=person, client_id="manage.py"))
            handle = sys.stdout if output == "-" else open(output, "w", encoding="utf-8")  # noqa: SIM115
            try:
                count = 0
                for item in items:
                    handle.write(json.dumps(item, ensure_ascii=False) + "\n")
                    count += item["kind"] == "fragment"
            finally:
                if handle is not sys.stdout:
                    handle.close()
        except MemoryhubError as exc:
            raise CommandError(exc.message) from exc
        except OSError as exc:
            raise CommandError(f"--output: {exc}") from exc
        if output != "-":
            self.stderr.write(f"Wrote {count} memories of {username} to {output}.")
