"""Background work is never lost for good: the periodic sweep enqueues again
whatever enrichment a lost task left pending, and `ingest --wait` shows
progress, queues the work again and gives up after a deadline saying how many
fragments are stuck and why.

Before: fragments whose task went to a queue no worker read stayed without an
embedding for ever (nothing scheduled `embed_missing_fragments`), and
`ingest --wait` waited for ever, with no message.
"""

from __future__ import annotations

import base64
import datetime as dt
import io
import json

import pytest
import redis
from django.conf import settings
from django.core.management import CommandError, call_command
from django.utils import timezone

from memoryhub.models import Fragment
from memoryhub.services import enrichment
from memoryhub.services.fragments import fragment_write
from memoryhub.services.ingest import fragment_ingest
from tests.conftest import poll

STALE = dt.timedelta(minutes=5)


def queued(queue: str) -> list[tuple[str, list]]:
    """(task name, args) of the task messages waiting in `queue`, in Celery's Redis transport."""
    broker = redis.Redis.from_url(settings.CELERY_BROKER_URL)
    found = []
    for raw in broker.lrange(queue, 0, -1):
        message = json.loads(raw)
        found.append((message["headers"]["task"], json.loads(base64.b64decode(message["body"]))[0]))
    return found


def task_ids(queue: str, name: str) -> list[str]:
    """The fragment ids the `name` tasks waiting in `queue` carry."""
    return [pk for task, args in queued(queue) if task == name for pk in args[0]]


def drain(queue: str) -> None:
    redis.Redis.from_url(settings.CELERY_BROKER_URL).delete(queue)


def backdate(*fragments: Fragment, by: dt.timedelta = STALE) -> None:
    Fragment.objects.filter(pk__in=[f.pk for f in fragments]).update(recorded_at=timezone.now() - by)


@pytest.fixture
def lost(live_people, private_task_queue):
    """Fragments whose enrichment task was lost: no vector, queued nowhere, minutes old."""
    people = live_people
    shared, _ = fragment_ingest(source=people.wiki, value="Rotate the pager every Monday at nine.")
    outcome = fragment_write(caller=people.caller(people.bruno), content="My pager PIN is on the fridge.",
                             resource="wiki-pager")
    private = Fragment.objects.get(pk=outcome.results[0].fragment_id)
    Fragment.objects.filter(pk__in=[shared.pk, private.pk]).update(embedding=None, embedded_at=None)
    backdate(shared, private)
    drain(private_task_queue)
    return [shared, private]


def test_the_sweep_enqueues_what_was_left_pending_and_nothing_fresh(lost, live_people, private_task_queue):
    fresh, _ = fragment_ingest(source=live_people.wiki, value="A fact recorded a moment ago.")
    Fragment.objects.filter(pk=fresh.pk).update(embedding=None)
    drain(private_task_queue)

    assert enrichment.sweep_pending(older_than=dt.timedelta(minutes=1)) == 2

    swept = task_ids(private_task_queue, enrichment.ENRICH_TASK)
    assert sorted(swept) == sorted(str(f.pk) for f in lost)


def test_a_decided_link_is_not_swept_again(lost, private_task_queue):
    enrichment.fragments_enrich(fragment_ids=[str(f.pk) for f in lost])
    assert all(f.linked_at or not f.resource_ref for f in Fragment.objects.filter(pk__in=[x.pk for x in lost]))
    drain(private_task_queue)
    assert enrichment.sweep_pending(older_than=dt.timedelta(minutes=1)) == 0


@pytest.mark.slow
def test_a_worker_finishes_what_the_sweep_enqueued(lost, start_worker):
    enrichment.sweep_pending(older_than=dt.timedelta(minutes=1))
    start_worker("sweeper")
    ids = [f.pk for f in lost]
    poll(lambda: not Fragment.objects.filter(pk__in=ids, embedding__isnull=True).exists()
         and Fragment.objects.get(pk=lost[1].pk).linked_at is not None,
         timeout=120, what="the swept fragments to be embedded, and the named document decided")
    # Decided, and not linked: the writer may read no document named wiki-pager.
    assert not Fragment.objects.get(pk=lost[1].pk).resources.exists()


def test_the_beat_runs_the_sweep_every_interval():
    entry = settings.CELERY_BEAT_SCHEDULE["sweep-pending-enrichment"]
    assert entry["task"] == enrichment.SWEEP_TASK
    assert entry["schedule"] == settings.MEMORYHUB_SWEEP_SECONDS


def test_ingest_wait_gives_up_after_its_deadline_saying_how_many_are_stuck_and_why(
        live_people, private_task_queue, tmp_path):
    export = tmp_path / "export.jsonl"
    export.write_text("\n".join(json.dumps({"resource_id": f"doc-{n}", "text": f"Fact number {n} about pagers."})
                                for n in range(3)))
    drain(private_task_queue)
    out, err = io.StringIO(), io.StringIO()
    with pytest.raises(CommandError) as stuck:
        call_command("ingest", "acme", "wiki", str(export), wait=True, wait_timeout=2, no_progress=True,
                     stdout=out, stderr=err)
    message = str(stuck.value)
    assert message.startswith("3 fragments are still waiting for their embedding after 2 s")
    assert "no Celery worker answers" in message
    # The work was queued (again) where a worker will find it.
    source_tasks = [args for task, args in queued(private_task_queue) if task == enrichment.EMBED_SOURCE_TASK]
    assert source_tasks and all(args == [live_people.wiki.pk] for args in source_tasks)


@pytest.mark.slow
def test_ingest_wait_completes_when_a_worker_runs(live_people, private_task_queue, start_worker, tmp_path):
    export = tmp_path / "export.jsonl"
    export.write_text("\n".join(json.dumps({"resource_id": f"w-{n}", "text": f"Worker fact {n}."})
                                for n in range(5)))
    start_worker("waiter")
    out = io.StringIO()
    call_command("ingest", "acme", "wiki", str(export), wait=True, wait_timeout=120, no_progress=True, stdout=out)
    assert "Every fragment is embedded." in out.getvalue()
    assert not Fragment.objects.filter(source=live_people.wiki, embedding__isnull=True).exists()


def test_a_task_carries_the_request_id_it_was_enqueued_under(live_people, private_task_queue):
    from memoryhub.observability import REQUEST_ID

    fragment_ingest(source=live_people.wiki, value="A fact no worker embedded yet.")
    drain(private_task_queue)
    token = REQUEST_ID.set("req-for-the-task-1")
    try:
        assert enrichment.sweep_pending(older_than=dt.timedelta(seconds=0)) >= 1
    finally:
        REQUEST_ID.reset(token)
    broker = redis.Redis.from_url(settings.CELERY_BROKER_URL)
    headers = [json.loads(raw)["headers"] for raw in broker.lrange(private_task_queue, 0, -1)]
    assert headers and all(h.get("request_id") == "req-for-the-task-1" for h in headers)
