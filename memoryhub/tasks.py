"""Celery tasks: thin wrappers that load by id and call one service.

Tasks are acknowledged after they run (settings: CELERY_TASK_ACKS_LATE) and
the services they call are idempotent, so a redelivered task is harmless.
"""

from __future__ import annotations

from celery import shared_task

from memoryhub.services.enrichment import fragments_embed_missing, fragments_enrich


@shared_task(
    acks_late=True,
    autoretry_for=(Exception,),
    retry_backoff=5,
    retry_backoff_max=600,
    retry_jitter=True,
    max_retries=8,
)
def enrich_fragments(fragment_ids: list[str]) -> dict[str, int]:
    """Tier 2 for fresh writes: embed and link resources."""
    return fragments_enrich(fragment_ids=fragment_ids)


@shared_task(acks_late=True, autoretry_for=(Exception,), retry_backoff=30, retry_backoff_max=1800, max_retries=5)
def embed_missing_fragments(max_batches: int = 50) -> int:
    """Sweep: embed any fragment a failed enrichment left without a vector."""
    return fragments_embed_missing(max_batches=max_batches)
