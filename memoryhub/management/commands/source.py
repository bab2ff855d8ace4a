import contextlib
from typing import Any

from django.conf import settings
from django.core.management.base import CommandError
from django.urls import NoReverseMatch, reverse

from memoryhub.management.answers import WorkspaceCommand
from memoryhub.services import sources


def source_state(health: sources.SourceHealth) -> dict[str, Any]:
    """A connected source's health line."""
    source = health.source
    return {
        "source": source.agent.name, "kind": source.kind,
        "collection": source.default_collection.name if source.default_collection else None,
        "state": health.state, "documents": health.documents, "deleted_documents": health.deleted_documents,
        "fragments": health.fragments, "pending_embedding": health.pending_embedding,
        "last_change": health.last_change.isoformat() if health.last_change else None,
        "last_error": source.last_error or None,
        "last_error_at": source.last_error_at.isoformat() if source.last_error_at else None,
    }


def source_endpoints() -> dict[str, str]:
    """Where a source gets its token and sends its documents."""
    base = settings.BASE_URL.rstrip("/")
    endpoints = {"token_endpoint": f"{base}{reverse('oauth2_provider:token')}"}
    with contextlib.suppress(NoReverseMatch):  # a deployment without the ingestion API mounted
        endpoints["ingest_endpoint"] = f"{base}{reverse('ingest-document-upsert')}"
    return endpoints


class Command(WorkspaceCommand):
    help = ("Without a name: every connected source's health line. With one: create it (--collection: where its "
            "documents go when they name none; its client id and secret printed once), its health (status), "
            "or: disable it (the ingestion API and `manage.py ingest` refuse it; its memory stays), enable it, "
            "rotate its secret (printed once), revoke it for good.")

    def add_operation_arguments(self, parser):
        parser.add_argument("name", nargs="?", help="The source (none: list the sources).")
        parser.add_argument("action", nargs="?", default="status",
                            choices=["create", "status", "disable", "enable", "rotate", "revoke"])
        parser.add_argument("--collection", default=None, help="create: its default collection.")
        parser.add_argument("--kind", default="documents", help="create: documents, tickets, chat…")

    def handle(self, *args, name, action, collection, kind, **options):
        caller = self.caller(options)
        if name is None:
            listed = [source_state(health) for health in sources.sources_health(caller=caller)]
            self.answer(options, {"sources": listed}, [
                f"{s['source']}: {s['state']}, {s['documents']} documents, {s['fragments']} fragments "
                f"({s['pending_embedding']} waiting for their embedding)" for s in listed] or "No sources yet.")
            return
        if action != "create" and (collection is not None or kind != "documents"):
            raise CommandError("--collection and --kind are for create.")
        result: dict[str, Any] = {}
        if action in ("create", "rotate"):
            if action == "create":
                _, credentials = sources.source_register(caller=caller, name=name, kind=kind, collection=collection)
                name = credentials.agent.name
            else:
                credentials = sources.source_rotate_secret(caller=caller, name=name)
            result.update(client_id=credentials.client_id, client_secret=credentials.client_secret,
                          **source_endpoints())
        elif action == "revoke":
            sources.source_revoke(caller=caller, name=name)
        elif action in ("disable", "enable"):
            sources.source_set_enabled(caller=caller, name=name, enabled=action == "enable")
        result = {**source_state(sources.source_health(caller=caller, name=name)), **result}
        lines = [f"{key}: {value}" for key, value in result.items()]
        if "client_secret" in result:
            lines.append("The secret is shown once: store it now (grant_type=client_credentials, scope ingest).")
        self.answer(options, result, lines)
