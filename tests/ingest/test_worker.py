"""Tier 2 in real Celery workers: documents sent over the API get embedded in
the background, and a worker killed mid-batch loses nothing and repeats nothing."""

from __future__ import annotations

import pytest
from django.db import connection

from memoryhub.models import Fragment
from tests.conftest import poll
from tests.ingest.conftest import doc, search, values

pytestmark = pytest.mark.slow


def pending() -> int:
    return Fragment.objects.filter(embedding__isnull=True).count()


@pytest.fixture
def embedding_log(transactional_db):
    """Every committed write of a fragment's vector, recorded by the database
    itself: the proof that each fragment was embedded exactly once."""
    with connection.cursor() as cursor:
        cursor.execute("""
            CREATE TABLE ingest_test_embedding_log (fragment_id uuid NOT NULL, written_at timestamptz NOT NULL);
            CREATE FUNCTION ingest_test_log_embedding() RETURNS trigger LANGUAGE plpgsql AS $$
            BEGIN
                INSERT INTO ingest_test_embedding_log VALUES (NEW.id, clock_timestamp());
                RETURN NEW;
            END $$;
            CREATE TRIGGER ingest_test_embedding_written AFTER UPDATE OF embedding ON memoryhub_fragment
                FOR EACH ROW WHEN (NEW.embedding IS DISTINCT FROM OLD.embedding)
                EXECUTE FUNCTION ingest_test_log_embedding();
        """)

    def writes() -> dict[str, int]:
        with connection.cursor() as cursor:
            cursor.execute("SELECT fragment_id::text, count(*) FROM ingest_test_embedding_log GROUP BY 1")
            return dict(cursor.fetchall())

    yield writes
    with connection.cursor() as cursor:
        cursor.execute("""
            DROP TRIGGER ingest_test_embedding_written ON memoryhub_fragment;
            DROP FUNCTION ingest_test_log_embedding();
            DROP TABLE ingest_test_embedding_log;
        """)


def section(i: int) -> str:
    # Distinct prose per section, long enough that a batch takes a moment to embed.
    return (f"# Service {i}\n\n" + " ".join(
        f"Service {i} runbook step {j}: check the queue depth of shard {i * 31 + j} and restart replica {j}."
        for j in range(9)
    ))


def test_the_worker_embeds_what_the_api_ingested(wiki_api, live_people, start_worker):
    query = "How do I recover when the payment processor is unavailable?"
    text = "If Stripe goes down, switch checkout to the backup acquirer and tell finance."
    assert wiki_api.upsert(doc("payments.md", text)).status_code == 201
    # Tier 1: found by full-text search at once; but nothing in the query's words matches yet.
    assert values(search(live_people, live_people.bruno, "Stripe backup acquirer")) == [text]
    assert values(search(live_people, live_people.bruno, query)) == []

    start_worker("w1")
    poll(lambda: wiki_api.progress().json()["pending_embedding"] == 0, timeout=240, what="the worker to embed")
    assert values(search(live_people, live_people.bruno, query)) == [text]


def test_a_worker_killed_mid_batch_loses_nothing_and_repeats_nothing(
    wiki_api, start_worker, embedding_log
):
    # Everything is committed (one task queued) before any worker runs.
    for n in range(8):
        body = "\n\n".join(section(n * 48 + i) for i in range(48))
        response = wiki_api.upsert(doc(f"services/{n}.md", body))
        assert response.status_code == 201, response.text
    total = Fragment.objects.count()
    assert total >= 5 * 64 and pending() == total

    def mid_batch() -> bool:
        # At least one batch written, and the worker holds its next batch's rows while it embeds them.
        with connection.cursor() as cursor:
            cursor.execute("""
                SELECT count(*) FROM pg_stat_activity
                 WHERE datname = current_database() AND pid <> pg_backend_pid()
                   AND state = 'idle in transaction' AND query LIKE '%%FOR UPDATE SKIP LOCKED%%'
            """)
            claiming = cursor.fetchone()[0] > 0
        return claiming and 0 < total - pending() < total

    first = start_worker("w1", visibility_timeout=5)
    poll(mid_batch, timeout=240, what="the first worker to be in the middle of a batch")
    first.kill()
    assert first.process.returncode == -9
    left = pending()
    assert 0 < left < total, "the kill should land with work left"
    assert all(count == 1 for count in embedding_log().values())

    # Nothing else will enqueue: only the broker redelivering the killed task can finish the job.
    second = start_worker("w2", visibility_timeout=5)
    poll(lambda: pending() == 0, timeout=300, what="the second worker to embed the rest")

    writes = embedding_log()
    assert len(writes) == total
    assert set(writes.values()) == {1}, "a fragment's vector was written more than once"
    assert "embed_source_fragments" in second.output()
    assert Fragment.objects.filter(embedded_at__isnull=True).count() == 0
