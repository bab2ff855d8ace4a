from typing import Any

from django.core.management.base import CommandError

from memoryhub.management.answers import WorkspaceCommand
from memoryhub.management.commands.person import person_line, person_state
from memoryhub.models import Role
from memoryhub.services import members, roles


def role_state(role: Role) -> dict[str, Any]:
    """A role of the list: who holds it (counts) and the collections its rules grant."""
    return {"name": role.name, "description": role.description,
            "people": getattr(role, "people_count", 0), "agents": getattr(role, "agent_count", 0),
            "collections": sorted(rule.collection.name for rule in role.access_rules.all())}


class Command(WorkspaceCommand):
    help = ("Without a name: the workspace's roles (how many people and agents hold each, the collections it "
            "reads). With one: create it, delete it (its access rules go, nobody holds it any more), assign it to "
            "a person or unassign it (from their next read on). Collections: `manage.py rule`.")

    def add_operation_arguments(self, parser):
        parser.add_argument("name", nargs="?", help="The role (none: list the roles).")
        parser.add_argument("action", nargs="?", choices=["create", "delete", "assign", "unassign"])
        parser.add_argument("username", nargs="?", help="assign, unassign: the person's login name.")
        parser.add_argument("--description", default="", help="create: what the role is for.")

    def handle(self, *args, name, action, username, description, **options):
        caller = self.caller(options)
        if name is None:
            listed = [role_state(role) for role in roles.roles_list(caller=caller)]
            self.answer(options, {"roles": listed}, [
                f"{r['name']}: {r['people']} people, {r['agents']} agents; reads {', '.join(r['collections']) or '-'}"
                for r in listed] or "No roles yet.")
            return
        if action is None:
            raise CommandError("Say what to do with the role: create, delete, assign USERNAME, unassign USERNAME.")
        if (username is None) != (action in ("create", "delete")):
            raise CommandError("assign and unassign name a person (and only they do).")
        if action == "create":
            role = roles.role_create(caller=caller, name=name, description=description)
            self.answer(options, role_state(role), f"role {role.name} created")
        elif action == "delete":
            role = roles.role_delete(caller=caller, name=name)
            self.answer(options, {"name": role.name, "deleted": True}, f"role {role.name} deleted, with its rules")
        else:
            change = members.member_role_add if action == "assign" else members.member_role_remove
            state = person_state(change(caller=caller, username=username, role=name))
            self.answer(options, state, person_line(state))
