"""Who a management command acts as: a named admin of the workspace
(`--as USERNAME`), or the explicit system caller when none is named. Either
way the command calls the same caller-first services as the pages and APIs,
which ask memoryhub.access; there is no unchecked twin for commands."""

from __future__ import annotations

from argparse import ArgumentParser

from django.core.management.base import CommandError

from memoryhub import access
from memoryhub.access import Caller
from memoryhub.errors import MemoryhubError
from memoryhub.services.arguments import storable
from memoryhub.services.workspaces import workspace_get


def add_acting_argument(parser: ArgumentParser) -> None:
    parser.add_argument(
        "--as", dest="acting_as", default="", metavar="USERNAME",
        help="Act as this admin of the workspace (default: the system caller of whoever runs manage.py).",
    )


def acting_caller(workspace: str, acting_as: str = "") -> Caller:
    try:
        tenant = workspace_get(slug=workspace)
        if not acting_as:
            return access.system_caller(tenant=tenant)
        return access.admin_named(tenant=tenant, username=storable(acting_as, field="as"), client_id="manage.py")
    except MemoryhubError as exc:
        raise CommandError(exc.message) from exc
