"""Connected sources (decision 6): an agent of kind `source` whose client may
only ingest, feeding shared fragments into collections. Registered by a
workspace admin; its credentials are shown once. An admin rotates its secret,
disables and enables it (a disabled source is refused by the ingestion API,
its memory stays), or revokes it for good; each has a health line: its last
change, documents, fragments, fragments waiting for their embedding, and the
last request the ingestion API refused."""

from __future__ import annotations

import datetime as dt
from dataclasses import dataclass
from typing import Any

from django.db import transaction
from django.db.models import Count, Max, Q, QuerySet
from django.utils import timezone

from memoryhub import access
from memoryhub.access import INGEST_SCOPE, Caller
from memoryhub.errors import NotFound, PermissionDenied
from memoryhub.models import Agent, Fragment, Resource, Source
from memoryhub.services.agents import (
    DISPLAY_NAME_MAX_CHARS,
    AgentCredentials,
    agent_name,
    confirmed,
    credentialed_agent_create,
    credentials_end,
    credentials_rotate,
    name_free,
)
from memoryhub.services.arguments import checked_text, storable
from memoryhub.services.collections import collection_get

SOURCE_KIND_MAX_CHARS = 64


def sources_list(*, caller: Caller) -> QuerySet[Source]:
    tenant = access.require_admin(caller)
    return Source.objects.filter(tenant=tenant).select_related("agent", "default_collection").order_by("agent__name")


def source_get(*, caller: Caller, name: str, lock: bool = False) -> Source:
    """A live connected source of the caller's workspace, by name (a revoked one is refused).
    With `lock`, its agent is locked first (FOR NO KEY UPDATE: a rotation or a
    revocation changes no key, so an ingest in flight is not held up): of two
    changes at once, the second waits and then sees the first's outcome."""
    tenant = access.require_admin(caller)
    name = storable(name, field="source")
    sources = Source.objects.select_related("agent", "tenant")
    if lock:
        sources = sources.select_for_update(no_key=True, of=("agent",))
    source = sources.filter(tenant=tenant, agent__name=name).first()
    if source is None:
        raise NotFound(f"No connected source named {name!r} in this workspace.", field="source")
    if source.agent.revoked_at is not None:
        raise PermissionDenied(f"The source {name!r} has been revoked.")
    return source


def source_feeding(*, caller: Caller, name: str) -> Source:
    """A source an ingest (the command's) may feed now: live and not disabled."""
    source = source_get(caller=caller, name=name)
    refusal = access.source_refusal(source)
    if refusal is not None:
        raise PermissionDenied(refusal)
    return source


@transaction.atomic
def source_register(
    *, caller: Caller, name: str, kind: str = "documents", collection: str | None = None,
) -> tuple[Source, AgentCredentials]:
    """A connected source with its own client credentials (shown once), feeding
    `collection` (by name) by default."""
    tenant = access.require_admin(caller)
    slug = agent_name(name)
    kind = checked_text(kind, field="kind", max_chars=SOURCE_KIND_MAX_CHARS).strip() or "documents"
    name_free(tenant, slug)
    default_collection = collection_get(caller=caller, name=collection) if collection else None
    agent, application, secret = credentialed_agent_create(
        caller=caller, tenant=tenant, slug=slug, client_name=f"source:{tenant.slug}:{slug}",
        display_name=name[:DISPLAY_NAME_MAX_CHARS], kind=Agent.Kind.SOURCE, scopes=INGEST_SCOPE,
    )
    source = Source.objects.create(tenant=tenant, agent=agent, kind=kind,
                                   default_collection=default_collection)
    return source, AgentCredentials(agent=agent, client_id=application.client_id, client_secret=secret)


@transaction.atomic
def source_rotate_secret(*, caller: Caller, name: str) -> AgentCredentials:
    """A new secret for a connected source (shown once); the old one and its tokens stop working now."""
    return credentials_rotate(source_get(caller=caller, name=name, lock=True).agent)


@transaction.atomic
def source_revoke(*, caller: Caller, name: str, confirm: str | None = None) -> Source:
    """End a connected source for good: its client and tokens are deleted; what it
    contributed stays, attributed to it, and stays governed by the access rules.
    With `confirm` (the pages ask the admin to type the name), it must be the name."""
    source = source_get(caller=caller, name=name, lock=True)
    confirmed(source.agent.name, confirm)
    credentials_end(source.agent)
    return source


@transaction.atomic
def source_set_enabled(*, caller: Caller, name: str, enabled: bool) -> Source:
    """Disable a source (the ingestion API refuses it from its next request;
    what it contributed stays, governed by the access rules) or enable it again
    (same credentials)."""
    source = source_get(caller=caller, name=name)
    source.disabled_at = None if enabled else (source.disabled_at or timezone.now())
    source.save(update_fields=["disabled_at"])
    return source


LAST_ERROR_MAX_CHARS = 500


def source_error_record(*, source: Source, message: str) -> None:
    """What the ingestion API refused of this source last, for its health line."""
    Source.objects.filter(pk=source.pk).update(last_error=message[:LAST_ERROR_MAX_CHARS],
                                               last_error_at=timezone.now())


@dataclass(frozen=True)
class SourceHealth:
    source: Source
    last_change: dt.datetime | None
    documents: int
    deleted_documents: int
    fragments: int
    pending_embedding: int

    @property
    def state(self) -> str:
        if self.source.agent.revoked_at is not None:
            return "revoked"
        return "disabled" if self.source.disabled_at is not None else "active"


def source_health(*, caller: Caller, name: str) -> SourceHealth:
    """One connected source's health line, a revoked one's too (NotFound for a
    name the workspace never connected)."""
    source = sources_list(caller=caller).filter(agent__name=storable(name, field="source")).first()
    if source is None:
        raise NotFound(f"No connected source named {name!r} in this workspace.", field="source")
    return _health([source])[0]


def sources_health(*, caller: Caller) -> list[SourceHealth]:
    """Every connected source of the caller's workspace with its health line."""
    return _health(list(sources_list(caller=caller)))


def _health(sources: list[Source]) -> list[SourceHealth]:
    """Health lines of sources the caller was allowed to see (two grouped
    queries, whatever the number of sources)."""
    documents: dict[int, Any] = {
        row["source"]: row for row in Resource.objects.filter(source__in=sources).values("source").annotate(
            live=Count("pk", filter=Q(deleted_at__isnull=True)),
            deleted=Count("pk", filter=Q(deleted_at__isnull=False)), last=Max("updated_at"))}
    fragments: dict[int, Any] = {
        row["source"]: row for row in Fragment.objects.filter(source__in=sources, retired_at__isnull=True)
        .values("source").annotate(live=Count("pk"), pending=Count("pk", filter=Q(embedding__isnull=True)))}
    empty: dict = {}
    return [
        SourceHealth(
            source=source, last_change=documents.get(source.pk, empty).get("last"),
            documents=documents.get(source.pk, empty).get("live", 0),
            deleted_documents=documents.get(source.pk, empty).get("deleted", 0),
            fragments=fragments.get(source.pk, empty).get("live", 0),
            pending_embedding=fragments.get(source.pk, empty).get("pending", 0),
        )
        for source in sources
    ]
