import json

from django.core.management.base import BaseCommand, CommandError

from memoryhub.errors import MemoryhubError
from memoryhub.management.acting import acting_caller, add_acting_argument
from memoryhub.services.portability import memory_erase_named


class Command(BaseCommand):
    help = ("Destroy the text of every memory a person owns (a deletion request). The receipts that served them "
            "keep their ids and value hashes; the erasure is recorded. Cannot be undone.")

    def add_arguments(self, parser):
        parser.add_argument("workspace")
        parser.add_argument("username")
        parser.add_argument("--yes", action="store_true", help="Confirm: without it nothing is erased.")
        parser.add_argument("--rewrite-storage", action="store_true",
                            help="Also rewrite the fragment table (VACUUM FULL) so no page keeps the old bytes; "
                                 "reads and writes of memory wait while it runs. It waits about a minute for a "
                                 "transaction older than the erasure, a cleaning run, or a session holding the "
                                 "table (it waits for that lock about two seconds at a time, so memory is never "
                                 "held up long) to end; past that it says so and fails (the erasure itself is "
                                 "done).")
        parser.add_argument("--json", action="store_true", help="Print the result as one JSON object.")
        add_acting_argument(parser)

    def handle(self, *args, workspace, username, yes, acting_as, **options):
        if not yes:
            raise CommandError(f"This destroys every memory of {username} for good; run again with --yes.")
        try:
            done = memory_erase_named(caller=acting_caller(workspace, acting_as), username=username,
                                      rewrite_storage=options["rewrite_storage"])
        except MemoryhubError as exc:
            raise CommandError(exc.message) from exc
        if options["json"]:
            self.stdout.write(json.dumps({"username": done.username, "erased": done.fragments,
                                          "erased_at": done.erasure.erased_at.isoformat() if done.erasure else None}))
        else:
            self.stdout.write(f"Erased {done.fragments} memories of {done.username}.")
