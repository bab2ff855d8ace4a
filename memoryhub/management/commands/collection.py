from typing import Any

from django.core.management.base import CommandError

from memoryhub.management.answers import WorkspaceCommand
from memoryhub.models import Collection
from memoryhub.services import collections


def collection_state(collection: Collection) -> dict[str, Any]:
    """A collection of the list: its live and retired fragments and the roles that read it."""
    return {"name": collection.name, "description": collection.description,
            "live": getattr(collection, "live", 0), "retired": getattr(collection, "retired", 0),
            "roles": sorted(rule.role.name for rule in collection.access_rules.all())}


class Command(WorkspaceCommand):
    help = ("Without a name: the workspace's collections with their live and retired fragments and the roles that "
            "read them. With one: create it, rename it NEW (connectors must send the new name), retire every live "
            "fragment in it (--confirm NAME; reads of the past still see them), delete it once nothing live is "
            "left (its rules go), or list its readers (everyone who may read it now, and through which roles).")

    def add_operation_arguments(self, parser):
        parser.add_argument("name", nargs="?", help="The collection (none: list the collections).")
        parser.add_argument("action", nargs="?", choices=["create", "rename", "retire", "delete", "readers"])
        parser.add_argument("new_name", nargs="?", metavar="NEW", help="rename: the new name.")
        parser.add_argument("--description", default="", help="create: what it holds.")
        parser.add_argument("--confirm", default="", metavar="NAME", help="retire: the collection's name again.")

    def handle(self, *args, name, action, new_name, description, confirm, **options):
        caller = self.caller(options)
        if name is None:
            listed = [collection_state(c) for c in collections.collections_list(caller=caller)]
            self.answer(options, {"collections": listed}, [
                f"{c['name']}: {c['live']} live, {c['retired']} retired; read by {', '.join(c['roles']) or 'nobody'}"
                for c in listed] or "No collections yet.")
            return
        if action is None:
            raise CommandError("Say what to do with the collection: create, rename NEW, retire --confirm NAME, "
                               "delete, readers.")
        if (new_name is None) != (action != "rename"):
            raise CommandError("rename takes the new name (and only it takes one).")
        if action == "create":
            created = collections.collection_create(caller=caller, name=name, description=description)
            self.answer(options, collection_state(created),
                        f"collection {created.name} created; nobody reads it until a rule says so")
            return
        if action == "rename":
            renamed = collections.collection_rename(caller=caller, collection=name, name=new_name)
            self.answer(options, {"name": renamed.name, "was": name}, f"collection {name} renamed {renamed.name}")
        elif action == "retire":
            retired = collections.collection_retire_fragments(caller=caller, collection=name, confirm=confirm)
            self.answer(options, {"name": name, "retired": retired}, f"{retired} fragments of {name} retired")
        elif action == "delete":
            deleted = collections.collection_delete(caller=caller, collection=name)
            self.answer(options, {"name": deleted, "deleted": True}, f"collection {deleted} deleted, with its rules")
        else:
            readers = [{"kind": r.kind, "name": r.name, "roles": list(r.roles)}
                       for r in collections.collection_readers(caller=caller, name=name)]
            self.answer(options, {"name": name, "readers": readers}, [
                f"{r['kind']} {r['name']} (through {', '.join(r['roles']) or 'no role'})" for r in readers]
                or f"Nobody may read {name}.")
