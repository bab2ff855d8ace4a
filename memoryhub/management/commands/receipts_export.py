import datetime as dt

from django.core.management.base import BaseCommand, CommandError

from memoryhub.errors import MemoryhubError
from memoryhub.management.acting import acting_caller, add_acting_argument
from memoryhub.management.json_lines import json_lines_write
from memoryhub.services.arguments import checked_instant
from memoryhub.services.receipt_chain import receipts_export


class Command(BaseCommand):
    help = ("Write a workspace's receipt chain and its signed checkpoints as JSON Lines, for "
            "`python contract/receipt_chain.py FILE --public-key KEY` to verify offline.")

    def add_arguments(self, parser):
        parser.add_argument("workspace")
        parser.add_argument("--since", default="", help="Start at the first receipt made at or after this instant "
                                                        "(ISO 8601, e.g. 2026-12-01 or 2026-12-01T09:00:00Z).")
        parser.add_argument("--output", default="-", help="The file to write ('-', the default: standard output); "
                                                          "written whole or not at all.")
        add_acting_argument(parser)

    def handle(self, *args, workspace, since, output, acting_as, **options):
        caller = acting_caller(workspace, acting_as)
        try:
            instant = checked_instant(_day_or_instant(since), field="since") if since else None
            written = json_lines_write(receipts_export(caller=caller, since=instant), output, count="receipt",
                                       ascii_only=True)
        except MemoryhubError as exc:
            raise CommandError(exc.message) from exc
        except OSError as exc:
            raise CommandError(f"--output: {exc}") from exc
        if output != "-":
            self.stderr.write(f"Wrote {written} receipts of {workspace} to {output}.")


def _day_or_instant(text: str) -> str:
    """A bare date means its first instant, in UTC."""
    try:
        return dt.datetime.combine(dt.date.fromisoformat(text), dt.time(), dt.UTC).isoformat()
    except ValueError:
        return text
