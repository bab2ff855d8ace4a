from typing import Any

from memoryhub.management.answers import WorkspaceCommand
from memoryhub.models import Membership
from memoryhub.services import collections, members

LIFECYCLE = {
    "deactivate": members.member_deactivate,
    "reactivate": members.member_reactivate,
    "remove": members.member_remove,
}
ADMIN_FLAG = {"grant-admin": True, "revoke-admin": False}


def person_state(membership: Membership) -> dict[str, Any]:
    """A person as every command answers them."""
    return {"username": membership.user.username, "active": membership.user.is_active,
            "removed": membership.removed_at is not None, "admin": membership.is_admin,
            "roles": sorted(role.name for role in membership.roles.all())}


def person_line(state: dict[str, Any]) -> str:
    return (f"{state['username']}: {'admin' if state['admin'] else 'member'}, "
            f"{'active' if state['active'] else 'inactive'}{', removed' if state['removed'] else ''}; "
            f"roles: {', '.join(state['roles']) or 'none'}")


class Command(WorkspaceCommand):
    help = ("Without a username: everyone in the workspace. With one: show them (roles, admin flag, the collections "
            "they may read), make them an admin (grant-admin) or an ordinary member (revoke-admin), deactivate them "
            "(signed out, every app disconnected at once), reactivate them, or remove them from the workspace "
            "(deactivated, no roles; their memory kept, readable by nobody, until erased). Roles: `manage.py role`.")

    def add_operation_arguments(self, parser):
        parser.add_argument("username", nargs="?", help="A person's login name (none: list everyone).")
        parser.add_argument("action", nargs="?", default="show",
                            choices=["show", *sorted(LIFECYCLE), *sorted(ADMIN_FLAG)])

    def handle(self, *args, username, action, **options):
        caller = self.caller(options)
        if username is None:
            people = [person_state(membership) for membership in members.members_list(caller=caller)]
            self.answer(options, {"people": people}, [person_line(state) for state in people] or "Nobody yet.")
            return
        if action == "show":
            membership, reach = collections.member_reach(caller=caller, username=username)
            state = person_state(membership)
            state["reads"] = [collection.name for collection in reach]
            self.answer(options, state, [person_line(state), f"reads: {', '.join(state['reads']) or 'nothing shared'}"])
            return
        if action in ADMIN_FLAG:
            membership = members.member_set_admin(caller=caller, username=username, is_admin=ADMIN_FLAG[action])
        else:
            membership = LIFECYCLE[action](caller=caller, username=username)
        state = person_state(membership)
        self.answer(options, state, person_line(state))
