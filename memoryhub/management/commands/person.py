import json

from django.core.management.base import BaseCommand, CommandError

from memoryhub.errors import MemoryhubError
from memoryhub.management.acting import acting_caller, add_acting_argument
from memoryhub.services import members

ACTIONS = {
    "deactivate": members.member_deactivate,
    "reactivate": members.member_reactivate,
    "remove": members.member_remove,
}


class Command(BaseCommand):
    help = ("Deactivate a person (signed out, every app disconnected at once), reactivate them, or remove them "
            "from the workspace (deactivated, no roles; their memory kept, readable by nobody, until erased).")

    def add_arguments(self, parser):
        parser.add_argument("workspace")
        parser.add_argument("username")
        parser.add_argument("action", choices=sorted(ACTIONS))
        parser.add_argument("--json", action="store_true", help="Print the result as one JSON object.")
        add_acting_argument(parser)

    def handle(self, *args, workspace, username, action, acting_as, **options):
        caller = acting_caller(workspace, acting_as)
        try:
            person = members.member_get(caller=caller, username=username).user
            membership = ACTIONS[action](caller=caller, user_id=person.pk)
        except MemoryhubError as exc:
            raise CommandError(exc.message) from exc
        state = {"username": membership.user.username, "active": membership.user.is_active,
                 "removed": membership.removed_at is not None, "admin": membership.is_admin}
        self.stdout.write(json.dumps(state) if options["json"] else
                          f"{state['username']}: {'active' if state['active'] else 'inactive'}"
                          f"{', removed' if state['removed'] else ''}.")
