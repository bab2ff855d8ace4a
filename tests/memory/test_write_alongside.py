"""A person's write embeds its facts on a thread of its own while its key is
claimed and its writer's lock is taken (write.write_draft, of
memoryhub.services.alongside), where the encoder leaves the process a core:
the same outcomes, statements and stored vectors as embedding at once; only
what the policy keeps is embedded, as the lock reads it; a retry's answer
waits for no embedding; an embedder failing on its thread leaves the fact to
enrichment, as at once."""

from __future__ import annotations

import logging
import re
import threading
import uuid
from concurrent.futures import ThreadPoolExecutor

import pytest
from django.db import connection
from django.test.utils import CaptureQueriesContext

from memoryhub.errors import NotFound
from memoryhub.models import Fragment, Proposal, Tenant
from memoryhub.services import alongside, enrichment, proposals, write
from memoryhub.services.fragments import fragment_write
from tests.memory.conftest import stuck_encoder

WAIT_SECONDS = 30

_UUID = re.compile(r"'?[0-9a-f]{8}-?[0-9a-f]{4}-?[0-9a-f]{4}-?[0-9a-f]{4}-?[0-9a-f]{12}'?")
_SAVEPOINT = re.compile(r'"s\d+_x\d+"')
_INSTANT = re.compile(r"'\d{4}-\d\d-\d\d[ T][0-9:.]+(?:[+-]\d\d:?\d\d|Z)?'")
_NUMBERS = re.compile(r"\s*-?\d+")  # a lock's key may be negative


def _shape(sql: str) -> str:
    """A statement with what differs from one writer to the next masked: ids, instants, savepoints, numbers."""
    return _NUMBERS.sub("<n>", _SAVEPOINT.sub("<savepoint>", _INSTANT.sub("<instant>", _UUID.sub("<id>", sql))))


# Stored, merged, superseded; dropped for privacy and for the workspace's policy; several facts in one write.
WRITES = [
    "My manager is Dana.",
    "my manager is Dana",
    "My manager is Ezra now.",
    "The deploy window is Thursday evening. My password is hunter2-Secret!",
    "Project Falcon launches in May. Lunch is at noon.",
    "The deploy window moved to Friday evening.",
]


def _writes(caller, monkeypatch, way: bool) -> tuple[list, list[str], list]:
    monkeypatch.setattr(alongside, "embeds_alongside", lambda: way)
    outcomes, statements = [], []
    for content in WRITES:
        with CaptureQueriesContext(connection) as captured:
            outcome = fragment_write(caller=caller, content=content)
        outcomes.append([(r.operation, r.reason, r.explanation) for r in outcome.results])
        statements.extend(_shape(q["sql"]) for q in captured.captured_queries)
    stored = Fragment.objects.filter(owner_user=caller.user).order_by("recorded_at", "value")
    return outcomes, statements, [(f.value, f.retired_reason, list(f.embedding)) for f in stored]


def test_a_write_embedded_alongside_does_what_one_embedded_at_once_does(people, monkeypatch):
    Tenant.objects.filter(pk=people.acme.pk).update(write_policy="blocklist", blocked_terms=["Project Falcon"])
    alongside_way = _writes(people.caller(people.bruno), monkeypatch, True)
    at_once = _writes(people.caller(people.cleo), monkeypatch, False)
    assert alongside_way == at_once
    outcomes = alongside_way[0]
    assert [op for op, _, _ in outcomes[0]] == ["stored"] and outcomes[1][0][0] == "merged"
    assert outcomes[2][0][0] == "superseded" and outcomes[3][1][1] == "privacy_drop"
    assert outcomes[4][0][1] == "policy_drop" and outcomes[4][1][0] == "stored"
    assert all(vector for _, _, vector in alongside_way[2])


def _concurrently(monkeypatch, statement: str) -> tuple[list[bool], list[bool], object]:
    """An encoder that, once begun, waits for `statement` to have run, and a
    wrapper that holds `statement` back until the encoder has begun: each
    waits for the other, so both waits end well only when the facts are
    embedded while `statement` runs (one after the other, the first to wait
    would time out)."""
    begun, ran = threading.Event(), threading.Event()
    real = write._embed
    encoder_waited: list[bool] = []
    statement_waited: list[bool] = []

    def embed(texts):
        begun.set()
        encoder_waited.append(ran.wait(WAIT_SECONDS))
        return real(texts)

    def noting(execute, sql, params, many, context):
        if statement in sql:
            statement_waited.append(begun.wait(WAIT_SECONDS))
        result = execute(sql, params, many, context)
        if statement in sql:
            ran.set()
        return result

    monkeypatch.setattr(write, "_embed", embed)
    return encoder_waited, statement_waited, noting


def test_a_persons_facts_are_embedded_while_the_key_is_claimed(people, monkeypatch):
    monkeypatch.setattr(alongside, "embeds_alongside", lambda: True)
    encoder_waited, statement_waited, noting = _concurrently(monkeypatch, "INSERT INTO memoryhub_idempotencyrecord")
    with connection.execute_wrapper(noting):
        outcome = fragment_write(caller=people.caller(people.bruno), content="The deploy window is Thursday.")
    assert encoder_waited == [True] and statement_waited == [True]
    assert Fragment.objects.get(pk=outcome.results[0].fragment_id).embedding is not None


def test_an_approved_proposal_is_embedded_while_the_writers_lock_is_taken(people, monkeypatch):
    monkeypatch.setattr(alongside, "embeds_alongside", lambda: True)
    bot = people.caller(people.triage_bot, client_id=people.triage_bot.client_id)
    fragment_write(caller=bot, content="The on-call rota changes on Mondays.")
    proposal = Proposal.objects.get(agent=people.triage_bot.agent, state=Proposal.State.PENDING)
    encoder_waited, statement_waited, noting = _concurrently(monkeypatch, "pg_advisory_xact_lock")
    with connection.execute_wrapper(noting):
        outcome = proposals.proposal_approve(caller=people.caller(people.ada), proposal_id=proposal.pk)
    assert encoder_waited == [True] and statement_waited == [True]
    stored = Fragment.objects.get(pk=outcome.results[0].fragment_id)
    assert stored.owner_agent == people.triage_bot.agent and stored.embedding is not None


@pytest.mark.parametrize("way", [True, False])
def test_a_retry_answers_without_waiting_for_an_embedding(people, monkeypatch, way):
    """Alongside, a retry's embedding may be under way: its answer does not
    wait for it. At once, a retry embeds nothing: nothing is embedded before
    the policy has kept a fact."""
    monkeypatch.setattr(alongside, "embeds_alongside", lambda: way)
    bruno = people.caller(people.bruno)
    first = fragment_write(caller=bruno, content="The release train leaves on Tuesdays.", idempotency_key="k1")
    with stuck_encoder(monkeypatch, write, WAIT_SECONDS) as finished:
        again = fragment_write(caller=bruno, content="The release train leaves on Tuesdays.", idempotency_key="k1")
        assert not finished.is_set()  # answered while the encoder still ran, or without it
    assert again == first


def test_only_what_the_policy_keeps_is_embedded_as_the_lock_reads_it(people, monkeypatch):
    """The draft begins embedding what the workspace's policy keeps as the
    caller was read; the policy read under the writer's lock decides: a fact
    it keeps that was not begun is embedded then, one it drops is neither
    judged nor stored."""
    monkeypatch.setattr(alongside, "embeds_alongside", lambda: True)
    embedded: list[list[str]] = []
    real = write._embed
    monkeypatch.setattr(write, "_embed", lambda texts: embedded.append(list(texts)) or real(texts))
    Tenant.objects.filter(pk=people.acme.pk).update(write_policy="blocklist", blocked_terms=["Project Falcon"])
    bruno = people.caller(people.bruno)
    content = "Project Falcon launches in May. Lunch is at noon. My password is hunter2-Secret!"
    outcome = fragment_write(caller=bruno, content=content)
    assert [r.operation for r in outcome.results] == ["dropped", "stored", "dropped"]
    assert embedded == [["Lunch is at noon."]]  # neither the refused fact nor the secret

    # The policy changed after the caller was read: the lock's reading decides.
    embedded.clear()
    Tenant.objects.filter(pk=people.acme.pk).update(blocked_terms=["Lunch"])
    outcome = fragment_write(caller=bruno, content="Project Falcon launches in May. Lunch is at one.")
    assert [(r.operation, r.reason) for r in outcome.results] == [("stored", None), ("dropped", "policy_drop")]
    assert embedded == [["Lunch is at one."], ["Project Falcon launches in May."]]
    stored = Fragment.objects.get(pk=outcome.results[0].fragment_id)
    assert stored.embedding is not None
    assert list(stored.embedding) == pytest.approx(real(["Project Falcon launches in May."])[0], abs=1e-6)


def test_an_embedder_failing_on_its_thread_leaves_the_fact_to_enrichment(people, monkeypatch,
                                                                           django_capture_on_commit_callbacks):
    from memoryhub.celery import app

    monkeypatch.setattr(alongside, "embeds_alongside", lambda: True)
    sent = []
    monkeypatch.setattr(app, "send_task", lambda name, args=None, **options: sent.append((name, args)))

    class Broken:
        def embed(self, texts):
            raise RuntimeError("embedder down")

    class Threads(logging.Handler):
        def __init__(self) -> None:
            super().__init__(logging.ERROR)
            self.names: list[str] = []

        def emit(self, record: logging.LogRecord) -> None:
            self.names.append(record.threadName)

    threads = Threads()
    write.logger.addHandler(threads)
    monkeypatch.setattr(write, "get_embedder", Broken)
    try:
        with django_capture_on_commit_callbacks(execute=True):
            outcome = fragment_write(caller=people.caller(people.bruno), content="Our office closes at 7pm.")
    finally:
        write.logger.removeHandler(threads)
    assert outcome.results[0].operation == "stored"
    assert sent == [(enrichment.ENRICH_TASK, [[outcome.results[0].fragment_id]])]
    assert Fragment.objects.get(pk=outcome.results[0].fragment_id).embedding is None
    # It failed on the embedding's own thread.
    assert len(threads.names) == 1 and threads.names[0].startswith("memoryhub-embed"), threads.names


@pytest.mark.parametrize("way", [True, False])
def test_a_write_that_fails_before_it_waits_begins_no_embedding(people, monkeypatch, way):
    """A workspace gone: the lock's statement refuses the write. Alongside, the
    embedding not yet begun (the pool's one thread is held here) never
    begins; at once, nothing is embedded before the policy has kept a fact."""
    monkeypatch.setattr(alongside, "embeds_alongside", lambda: way)
    pool = ThreadPoolExecutor(max_workers=1)
    monkeypatch.setattr(alongside, "_pool", pool)
    hold, held = threading.Event(), threading.Event()
    blocker = pool.submit(lambda: (held.set(), hold.wait(WAIT_SECONDS)))
    embedded: list[list[str]] = []
    monkeypatch.setattr(write, "_embed", lambda texts: embedded.append(texts) or [[1.0] * 384 for _ in texts])
    writer = write.Writer(tenant=Tenant(pk=uuid.uuid4(), slug="gone"), user=people.bruno)
    try:
        assert held.wait(WAIT_SECONDS)
        with pytest.raises(NotFound):
            write.pipeline_run(writer=writer, content="Lunch is at noon.")
    finally:
        hold.set()
        blocker.result(timeout=WAIT_SECONDS)
        pool.shutdown(wait=True)  # whatever was queued has run
    assert embedded == []
