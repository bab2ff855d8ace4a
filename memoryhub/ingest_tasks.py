"""Celery tasks of connected-source ingestion: thin, load by id, call one service.

Registered through MemoryhubConfig.ready() (Celery's autodiscovery finds only
memoryhub.tasks). Acknowledged after they run, so a killed worker's task is
delivered again once the broker's visibility timeout passes; the service only
fills vectors that are still empty, so a second delivery repeats nothing.
"""

from __future__ import annotations

from celery import shared_task

from memoryhub.services.ingest import embedding_run


@shared_task(
    ignore_result=True,  # progress is read from the fragments, not from task results
    acks_late=True,
    reject_on_worker_lost=True,
    autoretry_for=(Exception,),
    retry_backoff=5,
    retry_backoff_max=300,
    retry_jitter=True,
    max_retries=10,
)
def embed_source_fragments(source_id: int) -> int:
    """Tier 2 for a connected source: embed its fragments still without a vector."""
    return embedding_run(source_id=source_id).embedded
