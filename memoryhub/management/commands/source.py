import json

from django.core.management.base import BaseCommand, CommandError

from memoryhub.errors import MemoryhubError
from memoryhub.management.acting import acting_caller, add_acting_argument
from memoryhub.services import sources


class Command(BaseCommand):
    help = ("A connected source's health (status), or: disable it (the ingestion API refuses it; its memory "
            "stays), enable it, rotate its secret (printed once), revoke it for good.")

    def add_arguments(self, parser):
        parser.add_argument("workspace")
        parser.add_argument("name")
        parser.add_argument("action", choices=["status", "disable", "enable", "rotate", "revoke"])
        parser.add_argument("--json", action="store_true", help="Print the result as one JSON object.")
        add_acting_argument(parser)

    def handle(self, *args, workspace, name, action, acting_as, **options):
        caller = acting_caller(workspace, acting_as)
        result: dict = {"source": name}
        try:
            if action == "rotate":
                credentials = sources.source_rotate_secret(caller=caller, name=name)
                result.update(client_id=credentials.client_id, client_secret=credentials.client_secret)
            elif action == "revoke":
                sources.source_revoke(caller=caller, name=name)
            elif action in ("disable", "enable"):
                sources.source_set_enabled(caller=caller, name=name, enabled=action == "enable")
            health = next((h for h in sources.sources_health(caller=caller) if h.source.agent.name == name), None)
        except MemoryhubError as exc:
            raise CommandError(exc.message) from exc
        if health is None:
            raise CommandError(f"No connected source named {name!r} in this workspace.")
        result.update(
            state=health.state, documents=health.documents, deleted_documents=health.deleted_documents,
            fragments=health.fragments, pending_embedding=health.pending_embedding,
            last_change=health.last_change.isoformat() if health.last_change else None,
            last_error=health.source.last_error or None,
            last_error_at=health.source.last_error_at.isoformat() if health.source.last_error_at else None,
        )
        if options["json"]:
            self.stdout.write(json.dumps(result))
            return
        for key, value in result.items():
            self.stdout.write(f"{key}: {value}")
