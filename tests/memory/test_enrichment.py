"""Tier 2: embedding what is missing (in batches) and linking named documents,
by the service directly and by a real Celery worker on a queue of its own."""

from __future__ import annotations

import os
import subprocess
import sys
import uuid
from pathlib import Path

import pytest

from memoryhub import tasks
from memoryhub.mcp_adapter.render import search_output
from memoryhub.models import Fragment, Resource
from memoryhub.runtime.children import stop_child
from memoryhub.services import enrichment, write
from memoryhub.services.enrichment import EmbeddingRun
from memoryhub.services.fragments import fragment_write
from memoryhub.services.ingest import fragment_ingest
from memoryhub.services.search import fragments_search
from tests.conftest import poll
from tests.memory.conftest import private_fragment

ROOT = Path(__file__).resolve().parents[2]


class CountingEmbedder:
    name = "counting"
    dimensions = 384

    def __init__(self, inner):
        self.inner = inner
        self.batches: list[int] = []

    def embed(self, texts):
        self.batches.append(len(texts))
        return self.inner.embed(texts)


def test_it_embeds_what_is_missing_in_batches(people, monkeypatch):
    from memoryhub import embeddings

    bruno = people.caller(people.bruno)
    fragments = [private_fragment(bruno, f"Server {n} runs the billing cron.", embed=False) for n in range(5)]
    embedded_already = private_fragment(bruno, "Server 9 runs the mail relay.")
    counting = CountingEmbedder(embeddings.get_embedder())
    monkeypatch.setattr(enrichment, "get_embedder", lambda: counting)
    ids = [str(f.pk) for f in fragments] + [str(embedded_already.pk)]
    assert enrichment.fragments_embed_pending(fragment_ids=ids, batch_size=2) == EmbeddingRun(embedded=5, more=False)
    assert counting.batches == [2, 2, 1]
    assert not Fragment.objects.filter(embedding__isnull=True).exists()
    assert all(f.embedded_at is not None for f in Fragment.objects.all())
    # Nothing left: a redelivered task does no work.
    assert enrichment.fragments_embed_pending(fragment_ids=ids) == EmbeddingRun(embedded=0, more=False)


def test_it_links_the_named_resource_to_a_known_document(people, shared_fragment):
    # A document of the runbooks, which bruno (engineering) may read.
    shared_fragment("The Q3 plan is owned by the platform team.",
                    resources=[{"id": "wiki-q3", "title": "Q3 plan", "uri": "https://wiki.example/q3"}])
    doc = Resource.objects.get(tenant=people.acme, external_id="wiki-q3")
    bruno = people.caller(people.bruno)
    by_uri = private_fragment(bruno, "The Q3 plan moves the launch.", resource_ref="https://wiki.example/q3")
    by_id = private_fragment(bruno, "The Q3 plan cuts two features.", resource_ref="wiki-q3")
    unknown = private_fragment(bruno, "The Q4 plan is not written.", resource_ref="https://wiki.example/q4")
    assert enrichment.fragments_link_documents(fragment_ids=[str(by_uri.pk), str(by_id.pk), str(unknown.pk)]) == 2
    assert list(by_uri.resources.all()) == [doc] and list(by_id.resources.all()) == [doc]
    served = {f["id"]: f for f in search_output(fragments_search(caller=bruno, query="Q3 Q4 plan"))["fragments"]}
    assert served[str(by_id.pk)]["resources"] == [{"id": "wiki-q3", "title": "Q3 plan",
                                                   "uri": "https://wiki.example/q3"}]
    # Not linked: the writer's reference is still shown as provenance, and only
    # the reference (no title, no URI: nothing says whether such a document exists).
    assert served[str(unknown.pk)]["resources"] == [{"id": "https://wiki.example/q4", "title": "", "uri": ""}]


def test_the_tasks_are_acknowledged_late_and_retried_with_backoff():
    for task in (tasks.enrich_fragments, tasks.embed_source_fragments, tasks.sweep_pending):
        assert task.acks_late is True
        assert task.autoretry_for == (Exception,)
        assert task.retry_backoff and task.max_retries >= 5


# --------------------------------------------------------------------------- a real worker


@pytest.fixture
def worker_queue(transactional_db):
    """A Celery worker subprocess consuming a queue of its own, on the test database."""
    from django.db import connection

    from memoryhub.celery import app

    queue = f"core-test-{uuid.uuid4().hex[:8]}"
    db = connection.settings_dict
    url = f"postgres://{db['USER']}@/{db['NAME']}"
    if db["HOST"]:
        url += f"?host={db['HOST']}"
    env = {**os.environ, "MEMORYHUB_TASK_QUEUE": queue, "DATABASE_URL": url, "LOG_LEVEL": "WARNING"}
    process = subprocess.Popen(
        [sys.executable, "-m", "celery", "-A", "memoryhub", "worker", "--pool", "solo", "--queues", queue,
         "--without-heartbeat", "--without-gossip", "--without-mingle", "--loglevel", "WARNING"],
        cwd=ROOT, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE,
    )
    previous = app.conf.task_default_queue
    app.conf.task_default_queue = queue
    try:
        yield process
    finally:
        app.conf.task_default_queue = previous
        stop_child(process)
        connection.close()


@pytest.mark.slow
def test_a_real_worker_enriches_a_write_after_commit(live_people, worker_queue, monkeypatch):
    # A document of the runbooks, which bruno (engineering) may read.
    document, _ = fragment_ingest(source=live_people.wiki, value="The third-quarter plan belongs to the platform team.",
                                  resources=[{"id": "wiki-q3", "title": "Q3 plan", "uri": "https://wiki.example/q3"}])
    bruno = live_people.caller(live_people.bruno)
    # Tier 1 without the embedder: the write succeeds, the worker embeds it.
    monkeypatch.setattr(write, "_embed", lambda texts: None)
    outcome = fragment_write(caller=bruno, content="The Q3 plan moves the launch to October.",
                             resource="https://wiki.example/q3")
    fragment_id = outcome.results[0].fragment_id
    # Before enrichment it is already found lexically.
    served = fragments_search(caller=bruno, query="Q3 launch October").served_ids
    assert [pk for pk in served if pk != str(document.pk)] == [fragment_id]

    def enriched() -> Fragment | None:
        assert worker_queue.poll() is None, worker_queue.stderr.read().decode()[-2000:]
        fragment = Fragment.objects.get(pk=fragment_id)
        return fragment if fragment.embedding is not None and fragment.resources.exists() else None

    fragment = poll(enriched, timeout=120, interval=0.25, what="the worker to embed the write and link its document")
    assert fragment.embedding is not None and fragment.embedded_at is not None
    assert [r.title for r in fragment.resources.all()] == ["Q3 plan"]
