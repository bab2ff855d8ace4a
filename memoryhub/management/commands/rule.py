from django.core.management.base import CommandError

from memoryhub.management.answers import WorkspaceCommand
from memoryhub.services import access_rules


class Command(WorkspaceCommand):
    help = ("Without arguments: every role x every collection, marking what each role may read. With a role and "
            "a collection: grant holders of the role the right to read the collection, or revoke it (from their "
            "next read on).")

    def add_operation_arguments(self, parser):
        parser.add_argument("role", nargs="?")
        parser.add_argument("collection", nargs="?")
        parser.add_argument("action", nargs="?", choices=["grant", "revoke"])

    def handle(self, *args, role, collection, action, **options):
        caller = self.caller(options)
        if role is None:
            grid = access_rules.access_rules_grid(caller=caller)
            names = [c.name for c in grid.collections]
            rows = [{"role": r.name, "reads": [name for name, rule in zip(names, cells, strict=True) if rule]}
                    for r, cells in grid.rows]
            width = max([len(row["role"]) for row in rows] + [4])
            lines = [" " * width + "  " + "  ".join(names)] + [
                row["role"].ljust(width) + "  " + "  ".join(("x" if name in row["reads"] else "-").center(len(name))
                                                            for name in names) for row in rows]
            self.answer(options, {"collections": names, "roles": rows}, lines)
            return
        if action is None:
            raise CommandError("Name a role, a collection, and grant or revoke.")
        if action == "grant":
            rule = access_rules.access_rule_grant(caller=caller, role=role, collection=collection)
        else:
            rule = access_rules.access_rule_revoke(caller=caller, role=role, collection=collection)
        verb = "may now read" if action == "grant" else "may no longer read"
        self.answer(options, {"role": rule.role.name, "collection": rule.collection.name, "reads": action == "grant"},
                    f"{rule.role.name} {verb} {rule.collection.name}")
