"""Tier 2 enrichment: what a write does not wait for. One pipeline for every
fragment, whoever wrote it.

Tier 1 (the write, an ingested document) persists the fragment and decides its
outcome; it is in the full-text index at once. After commit, Celery
(memoryhub.tasks) embeds every fragment still without a vector, in batches, and
links the document a person or agent named (`resource`) to the workspace's
document of that name, when the writer may read it (memoryhub.access). Until
then a fragment is found by full-text search: nothing in search requires an
embedding.

Enqueueing goes through Celery by task name, so this module never imports the
tasks module (which imports it).

Embedding writes only where the vector is still empty, in one statement per
batch, and claims its rows with FOR UPDATE SKIP LOCKED: two workers (or a
redelivered task) share the work instead of repeating it, and a worker killed
mid-batch writes nothing and releases its rows.
"""

from __future__ import annotations

import datetime as dt
import logging
import uuid
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Final

from django.conf import settings
from django.core.cache import cache
from django.db import connection, transaction
from django.db.models import F, Q
from django.utils import timezone

from memoryhub import access
from memoryhub.celery import app as celery_app
from memoryhub.database.vectors import vector_text
from memoryhub.embeddings import get_embedder
from memoryhub.errors import PermissionDenied
from memoryhub.models import Fragment, Source
from memoryhub.observability import SWEEPS, SWEPT

logger = logging.getLogger("memoryhub.enrichment")

EMBED_BATCH_SIZE: Final = 64
# A task embeds at most this many batches, then hands over to a fresh task, so
# no single delivery runs anywhere near the broker's visibility timeout.
EMBED_MAX_BATCHES: Final = 16
# While this key exists an embedding task for the source is queued and has not
# started: later commits need not queue another.
_QUEUED_TTL_SECONDS: Final = 60
# The most fragments one sweep enqueues (the next sweep takes the rest).
SWEEP_LIMIT: Final = 20_000

ENRICH_TASK: Final = "memoryhub.tasks.enrich_fragments"
EMBED_SOURCE_TASK: Final = "memoryhub.tasks.embed_source_fragments"
SWEEP_TASK: Final = "memoryhub.tasks.sweep_pending"


# --------------------------------------------------------------------------- enqueueing


def enrichment_enqueue(*, fragment_ids: Sequence[str]) -> None:
    """Enrich these fragments once the current transaction commits (never for
    rows a rollback threw away)."""
    ids = [str(pk) for pk in fragment_ids]
    if ids:
        transaction.on_commit(lambda: _send(ENRICH_TASK, ids))


def embedding_enqueue(*, source: Source, again: bool = False) -> None:
    """After the current transaction commits, make sure an embedding task for
    this source is queued (`again`: queue one even if one is marked queued, for
    a wait that sees no progress)."""
    source_id, tenant_id = source.pk, source.tenant_id
    if again:
        cache.delete(_queued_key(source_id, tenant_id))
    transaction.on_commit(lambda: _queue_source(source_id, tenant_id))


def _queued_key(source_id: int, tenant_id: uuid.UUID) -> str:
    # The tenant's random id keeps a key from an earlier database (tests, a
    # restored backup) from matching a new source with the same number.
    return f"ingest:embed-queued:{tenant_id}:{source_id}"


def _queue_source(source_id: int, tenant_id: uuid.UUID) -> None:
    key = _queued_key(source_id, tenant_id)
    if not cache.add(key, 1, timeout=_QUEUED_TTL_SECONDS):
        return
    if not _send(EMBED_SOURCE_TASK, source_id):
        cache.delete(key)


def _send(task: str, *args: object) -> bool:
    try:
        celery_app.send_task(task, args=list(args))
    except Exception:  # noqa: BLE001 - the write is committed; its fragments are lexically searchable already
        logger.exception("could not queue %s; the next write or the sweep will", task)
        return False
    return True


# --------------------------------------------------------------------------- embedding


@dataclass(frozen=True)
class EmbeddingRun:
    embedded: int
    more: bool  # stopped at max_batches with work left


def fragments_embed_pending(
    *, fragment_ids: Sequence[str] | None = None, source_id: int | None = None,
    batch_size: int = EMBED_BATCH_SIZE, max_batches: int | None = EMBED_MAX_BATCHES,
) -> EmbeddingRun:
    """Embed fragments that have no vector yet (these, this source's, or any),
    live ones first, oldest first; one transaction and one write per batch."""
    embedder = get_embedder()
    embedded = 0
    batches = 0
    while max_batches is None or batches < max_batches:
        with transaction.atomic():
            pending = Fragment.objects.filter(embedding__isnull=True).exclude(retired_reason=Fragment.Retired.ERASED)
            if fragment_ids is not None:
                pending = pending.filter(pk__in=list(fragment_ids))
            if source_id is not None:
                pending = pending.filter(source_id=source_id)
            batch = list(
                pending.order_by(F("retired_at").asc(nulls_first=True), "recorded_at", "pk")
                .select_for_update(skip_locked=True)
                .values_list("pk", "value")[:batch_size]
            )
            if not batch:
                return EmbeddingRun(embedded=embedded, more=False)
            vectors = embedder.embed([value for _, value in batch])
            embedded += _embeddings_write([pk for pk, _ in batch], vectors)
        batches += 1
    return EmbeddingRun(embedded=embedded, more=True)


def _embeddings_write(ids: list, vectors: list[list[float]]) -> int:
    literals = [vector_text(vector) for vector in vectors]
    with connection.cursor() as cursor:
        cursor.execute(
            f"""
            UPDATE {Fragment._meta.db_table} AS f
               SET embedding = v.embedding::vector, embedded_at = %s
              FROM unnest(%s::uuid[], %s::text[]) AS v(id, embedding)
             WHERE f.id = v.id AND f.embedding IS NULL
            """,  # noqa: S608 - the table name is our model's
            [timezone.now(), ids, literals],
        )
        return cursor.rowcount


def source_embedding_run(*, source_id: int) -> EmbeddingRun:
    """What a source's embedding task does: clear the queued mark (commits from
    now on queue a new task), embed, and queue a follow-up when work is left."""
    source = Source.objects.filter(pk=source_id).first()
    if source is None:
        return EmbeddingRun(embedded=0, more=False)
    cache.delete(_queued_key(source.pk, source.tenant_id))
    run = fragments_embed_pending(source_id=source_id)
    if run.more:
        _queue_source(source.pk, source.tenant_id)
    logger.info("source %s: embedded %d fragments%s", source_id, run.embedded, " (more queued)" if run.more else "")
    return run


# --------------------------------------------------------------------------- document links


def fragments_link_documents(*, fragment_ids: Sequence[str]) -> int:
    """Link each fragment's named document (by external id or URI) to the
    workspace's document of that name, when its writer may read that document
    (memoryhub.access.document_to_link). Otherwise the fragment keeps only the
    name its writer gave; nothing records whether such a document exists."""
    linked = 0
    fragments = (
        Fragment.objects.filter(pk__in=list(fragment_ids), retired_at__isnull=True)
        .exclude(resource_ref="")
        .select_related("tenant", "owner_user", "owner_agent__tenant")
        .prefetch_related("resources")
    )
    decided = []
    for fragment in fragments:
        decided.append(fragment.pk)
        if fragment.resources.all():
            continue
        try:
            writer = (access.caller_for_user(user=fragment.owner_user) if fragment.owner_user is not None
                      else access.caller_for_agent(agent=fragment.owner_agent) if fragment.owner_agent is not None
                      else None)
        except PermissionDenied:
            continue  # a writer who lost their place links nothing
        document = access.document_to_link(writer, fragment.resource_ref) if writer is not None else None
        if document is not None:
            fragment.resources.add(document)
            # The version it rests on: a later change of the document shows as stale.
            fragment.grounded_versions = {**(fragment.grounded_versions or {}), str(document.pk): document.content_hash}
            fragment.save(update_fields=["grounded_versions"])
            linked += 1
    # Decided either way: the sweep does not come back to it.
    Fragment.objects.filter(pk__in=decided, linked_at__isnull=True).update(linked_at=timezone.now())
    return linked


def fragments_enrich(*, fragment_ids: Sequence[str]) -> dict[str, int]:
    """What a fresh write's task does: embed, then link named documents."""
    embedded = fragments_embed_pending(fragment_ids=fragment_ids, max_batches=None).embedded
    linked = fragments_link_documents(fragment_ids=fragment_ids)
    logger.info("enriched %d fragments: %d embedded, %d documents linked", len(fragment_ids), embedded, linked)
    return {"embedded": embedded, "linked": linked}


def fragments_pending(*, older_than: dt.timedelta, limit: int = SWEEP_LIMIT) -> list[str]:
    """Fragments tier 2 has not finished for longer than `older_than`: no vector
    yet, or a named document not yet linked (or found unreadable)."""
    cutoff = timezone.now() - older_than
    pending = Fragment.objects.filter(recorded_at__lte=cutoff).exclude(retired_reason=Fragment.Retired.ERASED).filter(
        Q(embedding__isnull=True) | (Q(linked_at__isnull=True, retired_at__isnull=True) & ~Q(resource_ref=""))
    )
    return [str(pk) for pk in pending.order_by("recorded_at").values_list("pk", flat=True)[:limit]]


def sweep_pending(*, older_than: dt.timedelta | None = None, limit: int = SWEEP_LIMIT) -> int:
    """The periodic sweep (Celery beat, every MEMORYHUB_SWEEP_SECONDS): enqueue
    enrichment again for every fragment left pending longer than a sweep
    interval, as a lost task, a restarted broker or a command writing to a
    queue no worker read would leave it. Enrichment is idempotent, so a
    fragment enqueued twice is embedded and linked once. Returns how many."""
    if older_than is None:
        older_than = dt.timedelta(seconds=settings.MEMORYHUB_SWEEP_SECONDS)
    ids = fragments_pending(older_than=older_than, limit=limit)
    SWEEPS.inc()
    SWEPT.inc(len(ids))
    for start in range(0, len(ids), EMBED_BATCH_SIZE):
        _send(ENRICH_TASK, ids[start:start + EMBED_BATCH_SIZE])
    if ids:
        logger.warning("sweep: %d fragments were pending for over %s; enrichment enqueued again", len(ids),
                       older_than)
    return len(ids)


def queue_depth() -> int:
    """Tasks waiting in the default Celery queue (-1 when the broker cannot be asked)."""
    try:
        with celery_app.connection_for_read() as connection:
            return int(connection.default_channel.client.llen(settings.CELERY_TASK_DEFAULT_QUEUE))
    except Exception:  # noqa: BLE001 - a gauge reports an unreachable broker, it does not fail the scrape
        logger.warning("could not read the task queue's depth", exc_info=True)
        return -1
