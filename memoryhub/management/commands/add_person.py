import getpass
import os
import sys

from django.core.management.base import CommandError

from memoryhub.management.answers import WorkspaceCommand
from memoryhub.management.commands.person import person_state
from memoryhub.services import members


class Command(WorkspaceCommand):
    help = (
        "Add a person to a workspace with roles, or update the roles and admin flag of one already there "
        "(idempotent; roles that do not exist yet are created). The password comes from the environment "
        "variable named by --password-env (default MEMORYHUB_PASSWORD) or is prompted."
    )

    def add_operation_arguments(self, parser):
        parser.add_argument("username")
        parser.add_argument("--email", default="")
        parser.add_argument("--roles", default="", help="Comma-separated role names.")
        parser.add_argument("--admin", action="store_true", help="Make the person a workspace admin.")
        parser.add_argument("--password-env", default="MEMORYHUB_PASSWORD")
        parser.add_argument("--no-password", action="store_true", help="Create without a usable password.")

    def handle(self, *args, username, email, roles: str, admin, password_env, no_password, **options):
        caller = self.caller(options)
        password = None
        if not no_password:
            password = os.environ.get(password_env)
            if not password:
                if not (sys.stdin is not None and sys.stdin.isatty()):
                    raise CommandError(f"Set {password_env} or pass --no-password: there is no terminal to prompt.")
                password = getpass.getpass(f"Password for {username}: ")
        wanted = [name.strip() for name in roles.split(",") if name.strip()]
        membership = members.member_ensure(caller=caller, username=username, password=password, email=email,
                                           roles=wanted, is_admin=admin)
        state = person_state(membership)
        kind, roles_now = "admin" if state["admin"] else "member", ", ".join(state["roles"]) or "no roles"
        self.answer(options, state, f"person {state['username']} in {options['workspace']}: {kind}, {roles_now}")
