"""What a workspace command answers: lines for people, or with `--json` one
JSON object on standard output for scripts. A refusal (an unknown workspace,
role, collection or person, a duplicate, a bad name) ends the command with
exit status 1 and its message on standard error; with `--json` it is also
answered as `{"error": {"code", "message", "field"?}}` on standard output,
the codes being the domain's (`not_found`, `conflict`, `invalid_argument`,
`permission_denied`)."""

from __future__ import annotations

import json
from argparse import ArgumentParser
from typing import Any

from django.core.management.base import BaseCommand, CommandError

from memoryhub.access import Caller
from memoryhub.errors import MemoryhubError
from memoryhub.management.acting import acting_caller, add_acting_argument


def refusal_of(exc: BaseException) -> MemoryhubError:
    """The domain's refusal behind `exc` (a CommandError raised from one keeps it as its cause)."""
    if isinstance(exc, MemoryhubError):
        return exc
    if isinstance(exc.__cause__, MemoryhubError):
        return exc.__cause__
    return MemoryhubError(str(exc))


class AnsweringCommand(BaseCommand):
    """A command answering people or, with `--json`, scripts; a refusal of the
    domain's ends it as described above."""

    answered = False

    def add_arguments(self, parser: ArgumentParser) -> None:
        self.add_operation_arguments(parser)
        parser.add_argument("--json", action="store_true", help="Answer with one JSON object (for scripts).")

    def add_operation_arguments(self, parser: ArgumentParser) -> None:
        """The command's own arguments."""

    def execute(self, *args: Any, **options: Any) -> str | None:
        self.answered = False
        try:
            return super().execute(*args, **options)
        except (MemoryhubError, CommandError) as exc:
            refusal = refusal_of(exc)
            if options.get("json") and not self.answered:
                self.stdout.write(json.dumps({"error": refusal.as_dict()}))
            if isinstance(exc, CommandError):
                raise
            raise CommandError(refusal.message) from exc

    def answer(self, options: dict[str, Any], result: dict[str, Any], lines: list[str] | str) -> None:
        """`result` as one JSON object with --json, else `lines` for people."""
        self.answered = True
        if options.get("json"):
            self.stdout.write(json.dumps(result))
            return
        for line in [lines] if isinstance(lines, str) else lines:
            self.stdout.write(line)


class WorkspaceCommand(AnsweringCommand):
    """A command acting on one workspace (its first argument) as the system
    caller or a named admin (`--as`), through the caller-first services."""

    def add_arguments(self, parser: ArgumentParser) -> None:
        parser.add_argument("workspace", help="The workspace's short name.")
        super().add_arguments(parser)
        add_acting_argument(parser)

    def caller(self, options: dict[str, Any]) -> Caller:
        return acting_caller(options["workspace"], options["acting_as"])
