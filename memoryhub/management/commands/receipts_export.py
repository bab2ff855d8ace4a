import datetime as dt
import json
import os
import sys

from django.core.management.base import BaseCommand, CommandError

from memoryhub.errors import MemoryhubError
from memoryhub.management.acting import acting_caller, add_acting_argument
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
        partial = f"{output}.partial"
        try:
            instant = checked_instant(_day_or_instant(since), field="since") if since else None
            items = receipts_export(caller=caller, since=instant)
            handle = sys.stdout if output == "-" else os.fdopen(  # noqa: SIM115 - closed below
                os.open(partial, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600), "w", encoding="ascii")
            try:
                written = 0
                for item in items:
                    handle.write(json.dumps(item, sort_keys=True, ensure_ascii=True) + "\n")
                    written += item["kind"] == "receipt"
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
            self.stderr.write(f"Wrote {written} receipts of {workspace} to {output}.")


def _day_or_instant(text: str) -> str:
    """A bare date means its first instant, in UTC."""
    try:
        return dt.datetime.combine(dt.date.fromisoformat(text), dt.time(), dt.UTC).isoformat()
    except ValueError:
        return text
