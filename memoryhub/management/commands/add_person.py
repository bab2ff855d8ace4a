import getpass
import os

from django.core.management.base import BaseCommand, CommandError

from memoryhub.errors import MemoryhubError
from memoryhub.services.workspaces import person_add, tenant_get


class Command(BaseCommand):
    help = (
        "Add a person to a workspace with roles (idempotent). The password comes from "
        "the environment variable named by --password-env (default MEMORYHUB_PASSWORD) or is prompted."
    )

    def add_arguments(self, parser):
        parser.add_argument("workspace")
        parser.add_argument("username")
        parser.add_argument("--email", default="")
        parser.add_argument("--roles", default="", help="Comma-separated role names.")
        parser.add_argument("--admin", action="store_true", help="Make the person a workspace admin.")
        parser.add_argument("--password-env", default="MEMORYHUB_PASSWORD")
        parser.add_argument("--no-password", action="store_true", help="Create without a usable password.")

    def handle(self, *args, workspace, username, email, roles, admin, password_env, no_password, **options):
        password = None
        if not no_password:
            password = os.environ.get(password_env)
            if not password:
                if not self.stdin_is_tty():
                    raise CommandError(f"Set {password_env} or pass --no-password: there is no terminal to prompt.")
                password = getpass.getpass(f"Password for {username}: ")
        try:
            user = person_add(
                tenant=tenant_get(slug=workspace), username=username, password=password, email=email,
                roles=[r for r in roles.split(",") if r.strip()], is_admin=admin,
            )
        except MemoryhubError as exc:
            raise CommandError(exc.message) from exc
        roles_now = ", ".join(r.name for r in user.membership.roles.all()) or "no roles"
        kind = "admin" if user.membership.is_admin else "member"
        self.stdout.write(f"person {user.username} in {workspace}: {kind}, {roles_now}")

    @staticmethod
    def stdin_is_tty() -> bool:
        import sys

        return sys.stdin is not None and sys.stdin.isatty()
