"""Tier 2 enrichment: what a write does not wait for.

Tier 1 (the write itself) persists the fact and decides its outcome. After
commit, a Celery task (memoryhub.tasks.enrich_fragments) embeds every fragment
still without a vector, in batches, and links the resource its writer named to
a known document of the workspace. Until then a fragment is still found by
full-text search: nothing in search requires an embedding.
"""

from __future__ import annotations

import logging
from collections.abc import Sequence

from django.db import transaction
from django.db.models import Q
from django.utils import timezone

from memoryhub.models import Fragment, Resource

logger = logging.getLogger("memoryhub.enrichment")

BATCH_SIZE = 64


def enrichment_enqueue(*, fragment_ids: Sequence[str]) -> None:
    """Enrich these fragments once the current transaction commits (never for
    rows a rollback threw away)."""
    from memoryhub.tasks import enrich_fragments

    ids = [str(pk) for pk in fragment_ids]
    if ids:
        transaction.on_commit(lambda: enrich_fragments.delay(ids))


def fragments_embed_missing(*, fragment_ids: Sequence[str] | None = None, batch_size: int = BATCH_SIZE,
                            max_batches: int | None = None) -> int:
    """Embed fragments that have no vector yet (these, or any); returns how many.

    Each batch is its own transaction and skips rows another worker holds, so
    two workers (or a redelivered task) never embed the same row twice at once.
    """
    from memoryhub.embeddings import get_embedder

    embedder = get_embedder()
    done = 0
    batches = 0
    while max_batches is None or batches < max_batches:
        with transaction.atomic():
            pending = Fragment.objects.filter(embedding__isnull=True)
            if fragment_ids is not None:
                pending = pending.filter(pk__in=list(fragment_ids))
            batch = list(
                pending.order_by("recorded_at", "pk")
                .select_for_update(skip_locked=True)
                .only("pk", "value")[:batch_size]
            )
            if not batch:
                break
            vectors = embedder.embed([fragment.value for fragment in batch])
            now = timezone.now()
            for fragment, vector in zip(batch, vectors, strict=True):
                fragment.embedding = vector
                fragment.embedded_at = now
            Fragment.objects.bulk_update(batch, ["embedding", "embedded_at"])
        done += len(batch)
        batches += 1
    return done


def fragments_link_resources(*, fragment_ids: Sequence[str]) -> int:
    """Link each fragment's named resource (by external id or URI) to the
    workspace's document of that name, when there is one."""
    linked = 0
    fragments = Fragment.objects.filter(pk__in=list(fragment_ids)).exclude(resource_ref="")
    for fragment in fragments.prefetch_related("resources"):
        if fragment.resources.exists():
            continue
        ref = fragment.resource_ref
        resource = (
            Resource.objects.filter(tenant_id=fragment.tenant_id, deleted_at__isnull=True)
            .filter(Q(external_id=ref) | Q(uri=ref))
            .order_by("pk")
            .first()
        )
        if resource is not None:
            fragment.resources.add(resource)
            linked += 1
    return linked


def fragments_enrich(*, fragment_ids: Sequence[str]) -> dict[str, int]:
    embedded = fragments_embed_missing(fragment_ids=fragment_ids)
    linked = fragments_link_resources(fragment_ids=fragment_ids)
    logger.info("enriched %d fragments: %d embedded, %d resources linked", len(fragment_ids), embedded, linked)
    return {"embedded": embedded, "linked": linked}
