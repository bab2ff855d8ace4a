"""Tier 2: embedding what is missing (in batches) and linking named resources,
by the service directly and by a real Celery worker on a queue of its own."""

from __future__ import annotations

import os
import subprocess
import sys
import time
import uuid
from pathlib import Path

import pytest

from memoryhub import tasks
from memoryhub.models import Fragment, Resource
from memoryhub.services import enrichment, write
from memoryhub.services.search import memory_search
from memoryhub.services.write import memory_write
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


def test_it_embeds_what_is_missing_in_batches(acme, monkeypatch):
    from memoryhub import embeddings

    fragments = [private_fragment(acme.owner, f"Server {n} runs the billing cron.", embed=False) for n in range(5)]
    embedded_already = private_fragment(acme.owner, "Server 9 runs the mail relay.")
    counting = CountingEmbedder(embeddings.get_embedder())
    monkeypatch.setattr(embeddings, "get_embedder", lambda: counting)
    ids = [str(f.pk) for f in fragments] + [str(embedded_already.pk)]
    assert enrichment.fragments_embed_missing(fragment_ids=ids, batch_size=2) == 5
    assert counting.batches == [2, 2, 1]
    assert not Fragment.objects.filter(embedding__isnull=True).exists()
    assert all(f.embedded_at is not None for f in Fragment.objects.all())
    # Nothing left: a redelivered task does no work.
    assert enrichment.fragments_embed_missing(fragment_ids=ids) == 0


def test_it_links_the_named_resource_to_a_known_document(acme):
    doc = Resource.objects.create(tenant=acme.tenant, external_id="wiki-q3", title="Q3 plan",
                                  uri="https://wiki.example/q3")
    by_uri = private_fragment(acme.owner, "The Q3 plan moves the launch.", resource_ref="https://wiki.example/q3")
    by_id = private_fragment(acme.owner, "The Q3 plan cuts two features.", resource_ref="wiki-q3")
    unknown = private_fragment(acme.owner, "The Q4 plan is not written.", resource_ref="https://wiki.example/q4")
    assert enrichment.fragments_link_resources(fragment_ids=[str(by_uri.pk), str(by_id.pk), str(unknown.pk)]) == 2
    assert list(by_uri.resources.all()) == [doc] and list(by_id.resources.all()) == [doc]
    served = {f["id"]: f for f in memory_search(caller=acme.owner, query="Q3 Q4 plan")["fragments"]}
    assert served[str(by_id.pk)]["resources"] == [{"id": "wiki-q3", "title": "Q3 plan",
                                                   "uri": "https://wiki.example/q3"}]
    # Not linked yet: the writer's reference is still shown as provenance.
    assert served[str(unknown.pk)]["resources"] == [{"id": "https://wiki.example/q4", "title": "",
                                                     "uri": "https://wiki.example/q4"}]


def test_the_tasks_are_acknowledged_late_and_retried_with_backoff():
    for task in (tasks.enrich_fragments, tasks.embed_missing_fragments):
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
        process.terminate()
        try:
            process.wait(timeout=30)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait(timeout=10)
        connection.close()


@pytest.mark.slow
def test_a_real_worker_enriches_a_write_after_commit(acme, worker_queue, monkeypatch):
    Resource.objects.create(tenant=acme.tenant, external_id="https://wiki.example/q3", title="Q3 plan")
    # Tier 1 without the embedder: the write succeeds, the worker embeds it.
    monkeypatch.setattr(write, "_embed", lambda texts: None)
    out = memory_write(caller=acme.owner, content="The Q3 plan moves the launch to October.",
                       resource="https://wiki.example/q3")
    fragment_id = out["results"][0]["fragment_id"]
    # Before enrichment it is already found lexically.
    assert [f["id"] for f in memory_search(caller=acme.owner, query="Q3 launch October")["fragments"]] == [fragment_id]

    deadline = time.monotonic() + 120
    fragment = Fragment.objects.get(pk=fragment_id)
    while (fragment.embedding is None or not fragment.resources.exists()) and time.monotonic() < deadline:
        assert worker_queue.poll() is None, worker_queue.stderr.read().decode()[-2000:]
        time.sleep(0.25)
        fragment = Fragment.objects.get(pk=fragment_id)
    assert fragment.embedding is not None and fragment.embedded_at is not None
    assert [r.title for r in fragment.resources.all()] == ["Q3 plan"]
