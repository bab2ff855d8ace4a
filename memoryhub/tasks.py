"""Celery tasks, the only tasks module: thin wrappers that load by id and call
one service (memoryhub.services.enrichment, .receipt_chain, .portability).

Tasks are acknowledged after they run and rejected when a worker is lost
(settings: CELERY_TASK_ACKS_LATE, CELERY_TASK_REJECT_ON_WORKER_LOST), so a
killed worker's task is delivered again; the services only fill vectors that
are still empty and links that are still missing, so a second delivery
repeats nothing. Services enqueue by the names below, after commit.
"""

from __future__ import annotations

from celery import shared_task

from memoryhub.services import enrichment, portability, receipt_chain, tallies

_RETRY = {"autoretry_for": (Exception,), "retry_backoff": 5, "retry_backoff_max": 600, "retry_jitter": True}


@shared_task(name=enrichment.ENRICH_TASK, acks_late=True, reject_on_worker_lost=True, max_retries=8, **_RETRY)
def enrich_fragments(fragment_ids: list[str]) -> dict[str, int]:
    """Tier 2 for fresh writes: embed and link named documents."""
    return enrichment.fragments_enrich(fragment_ids=fragment_ids)


@shared_task(name=enrichment.EMBED_SOURCE_TASK, ignore_result=True, acks_late=True, reject_on_worker_lost=True,
             max_retries=10, **_RETRY)
def embed_source_fragments(source_id: int) -> int:
    """Tier 2 for a connected source: embed its fragments still without a vector."""
    return enrichment.source_embedding_run(source_id=source_id).embedded


@shared_task(name=enrichment.SWEEP_TASK, acks_late=True, max_retries=5, **_RETRY)
def sweep_pending() -> int:
    """The periodic sweep (settings.CELERY_BEAT_SCHEDULE): enqueue enrichment again
    for fragments left pending longer than a sweep interval."""
    return enrichment.sweep_pending()


@shared_task(name=receipt_chain.CHECKPOINT_TASK, acks_late=True, max_retries=5, **_RETRY)
def checkpoint_receipts() -> int:
    """The periodic checkpoint (settings.CELERY_BEAT_SCHEDULE): sign the head of
    every workspace's receipt chain that moved since its last checkpoint."""
    return receipt_chain.checkpoints_due()


@shared_task(name=portability.CLEAN_TASK, acks_late=True, max_retries=5, **_RETRY)
def clean_erased_storage() -> int:
    """After an erasure, and from the beat until none waits: the erased values'
    old row versions and index entries leave the storage."""
    return portability.storage_clean_due()


@shared_task(name=tallies.FOLD_TASK, acks_late=True, max_retries=5, **_RETRY)
def fold_tallies() -> int:
    """From the beat, every sweep interval: each home's tally rows folded into one."""
    return tallies.fold_tallies()
