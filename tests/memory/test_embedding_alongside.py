"""A search's query embedded on a thread of its own while its first statement
runs and its index statement is compiled (search.Embedding), where the
encoder leaves the process a core: the same reads, the same statements, the
vector put where the statement compiled before it expects it."""

from __future__ import annotations

import dataclasses
import json
import logging
import os
import re
import signal
import threading
import time

import pytest
from django.db import connection, transaction
from django.test.utils import CaptureQueriesContext
from django.utils import timezone

from memoryhub import access, embeddings
from memoryhub.database.vectors import vector_text
from memoryhub.errors import DeadlineExceeded
from memoryhub.models import Receipt, Tenant
from memoryhub.observability import REQUEST_ID, JsonFormatter
from memoryhub.services import search
from memoryhub.services.receipts import receipt_replay
from memoryhub.services.search import fragments_search
from tests.memory.conftest import private_fragment

# Long enough for a loaded CI machine; a search that embeds at once never reaches it.
WAIT_SECONDS = 30


class Broken:
    """An embedder that is down."""

    def embed(self, texts):
        raise RuntimeError("embedder down")


@pytest.fixture
def bruno(people):
    return people.caller(people.bruno)


@pytest.fixture
def alongside(monkeypatch):
    monkeypatch.setattr(search, "embeds_alongside", lambda: True)


def _read(result) -> dict:
    """Everything a search answered, the receipt's id aside."""
    return {
        "hits": [(str(hit.fragment.pk), hit.score, hit.ordering, hit.fragment.value,
                  hit.provenance.agents if hit.provenance else None) for hit in result.hits],
        "abstained": result.abstained, "notice": result.notice, "truncated": result.truncated,
    }


# What differs from one read to the next whichever way it embeds: its instant, its savepoint's name, its receipt.
_INSTANT = re.compile(r"'\d{4}-\d\d-\d\d[ T][0-9:.]+(?:[+-]\d\d:?\d\d|Z)?'")
_SAVEPOINT = re.compile(r'"s\d+_x\d+"')


def _statements(captured: CaptureQueriesContext) -> list[str]:
    """The statements a search sent, its instants and savepoints masked; the
    receipt's (its id, salt and chain entry are new each time) only by its start."""
    return [_SAVEPOINT.sub('"<savepoint>"', _INSTANT.sub("'<instant>'", q["sql"]))
            if "memoryhub_receiptchain" not in q["sql"] else q["sql"][:40] for q in captured.captured_queries]


def _both_ways(monkeypatch, search_once) -> tuple[dict, dict, list[str], list[str]]:
    """The same search embedded alongside and at once: each read, and the statements each sent."""
    answers, statements = [], []
    for way in (True, False):
        monkeypatch.setattr(search, "embeds_alongside", lambda way=way: way)
        with CaptureQueriesContext(connection) as captured:
            answers.append(_read(search_once()))
        statements.append(_statements(captured))
    return answers[0], answers[1], statements[0], statements[1]


def test_a_search_embeds_alongside_only_when_the_encoder_leaves_a_core(monkeypatch):
    class Counted:
        def __init__(self, threads):
            self.threads = threads

    monkeypatch.delenv("MEMORYHUB_EMBEDDER_THREADS", raising=False)
    monkeypatch.setattr(embeddings, "usable_cores", lambda: 2)
    assert embeddings.leaves_a_core(Counted(1))
    assert not embeddings.leaves_a_core(Counted(2))
    assert not embeddings.leaves_a_core(Counted(4))
    assert not embeddings.leaves_a_core(object())  # an embedder that does not say takes every core
    monkeypatch.setattr(embeddings, "usable_cores", lambda: 8)
    assert embeddings.leaves_a_core(Counted(1))
    # The product's encoder says what it takes: a server's worker on its one core of two encodes on one thread.
    monkeypatch.setenv("MEMORYHUB_CORES_PER_PROCESS", "1")
    monkeypatch.setattr(embeddings, "usable_cores", lambda: 2)
    monkeypatch.setattr(search, "get_embedder", lambda: embeddings.MiniLMOnnxEmbedder())
    assert search.embeds_alongside()
    monkeypatch.setenv("MEMORYHUB_CORES_PER_PROCESS", "2")
    assert not search.embeds_alongside()

    def broken():
        raise RuntimeError("no model")

    # An embedder that cannot be made embeds at once, and _embed reports it (the read is lexical).
    monkeypatch.setattr(search, "get_embedder", broken)
    assert not search.embeds_alongside()


def test_embedding_alongside_reads_what_embedding_at_once_reads(people, bruno, shared_fragment, monkeypatch):
    shared_fragment("Database failover: promote the replica and repoint the payments service.", "incidents")
    shared_fragment("Database maintenance: vacuum the payments tables every Sunday.")
    private_fragment(bruno, "The VPN config lives in the ops vault under vpn/prod.")
    agent = people.caller(people.triage_bot)
    private_fragment(agent, "Paging rota: the payments team is on call this week.")
    searches = {
        "both pools": lambda: fragments_search(caller=bruno, query="payments database"),
        "a private memory": lambda: fragments_search(caller=bruno, query="where is the VPN config?"),
        "narrowed": lambda: fragments_search(caller=bruno, query="payments database",
                                             created_after="2000-01-01T00:00:00Z"),
        "stop words only: the vector alone": lambda: fragments_search(caller=bruno, query="what is it"),
        "an agent": lambda: fragments_search(caller=agent, query="who is on call for payments"),
        "nothing visible matches": lambda: fragments_search(caller=bruno, query="zanzibar quokka"),
    }
    for name, search_once in searches.items():
        alongside, at_once, statements_alongside, statements_at_once = _both_ways(monkeypatch, search_once)
        assert alongside == at_once, name
        assert statements_alongside == statements_at_once, name
        assert alongside["hits"] or name in ("stop words only: the vector alone", "nothing visible matches"), name

    # The judgment plane turned on after the caller was read: the task is embedded once the read sees it on.
    Tenant.objects.filter(pk=bruno.tenant.pk).update(judgment_plane=True)
    read_before = people.caller(people.bruno)
    embedded: list[list[str]] = []
    real = search._embed
    monkeypatch.setattr(search, "_embed", lambda texts: embedded.append(list(texts)) or real(texts))
    task = {"task": "incident response", "task_tags": ["incidents"]}

    def read_before_the_plane():
        read_before.tenant.judgment_plane = False  # as the caller was read (the prologue reads it on)
        return fragments_search(caller=read_before, query="payments database", **task)

    alongside, at_once, statements_alongside, statements_at_once = _both_ways(monkeypatch, read_before_the_plane)
    assert alongside == at_once and alongside["hits"] and statements_alongside == statements_at_once
    assert embedded == [["payments database"], ["incident response incidents"]] * 2
    # On as the caller was read: the task goes with the query, in one batch, and arranges the same result.
    embedded.clear()
    alongside, at_once, statements_alongside, statements_at_once = _both_ways(monkeypatch, lambda: fragments_search(
        caller=people.caller(people.bruno), query="payments database", **task))
    assert alongside == at_once and alongside["hits"] and statements_alongside == statements_at_once
    assert embedded == [["payments database", "incident response incidents"]] * 2

    # A receipt's replay is the same read again, whichever way each embeds.
    fragments_search(caller=bruno, query="payments database")
    taken = Receipt.objects.order_by("-created_at").values_list("pk", flat=True).first()
    replays = []
    for way in (True, False):
        monkeypatch.setattr(search, "embeds_alongside", lambda way=way: way)
        replays.append(receipt_replay(caller=bruno, receipt_id=taken).served_now)
    assert replays[0] == replays[1] and replays[0]

    # An embedder that fails on its thread leaves the read lexical, as at once.
    monkeypatch.setattr(search, "get_embedder", Broken)
    alongside, at_once, _, _ = _both_ways(monkeypatch, searches["a private memory"])
    assert alongside == at_once and alongside["hits"]


@pytest.mark.parametrize("ranking", [
    {"fusion": "rrf"}, {"fusion": "vector"}, {"fusion": "lexical"}, {"lexical_ranker": "ts_rank_cd"},
    {"lexical_ranker": "ts_rank", "fusion": "rrf"},
])
def test_every_ranking_reads_the_same_either_way(bruno, shared_fragment, monkeypatch, ranking):
    """Every ranking reads the same either way; one whose pools do not share BM25's statement compiles
    nothing before the vector, and waits for it."""
    shared_fragment("Database failover: promote the replica and repoint the payments service.", "incidents")
    private_fragment(bruno, "The VPN config lives in the ops vault under vpn/prod.")
    monkeypatch.setattr(search, "RANKING", dataclasses.replace(search.RANKING, **ranking))
    for query in ("payments database", "where is the VPN config?", "what is it"):
        alongside, at_once, statements_alongside, statements_at_once = _both_ways(
            monkeypatch, lambda query=query: fragments_search(caller=bruno, query=query))
        assert alongside == at_once, query
        assert statements_alongside == statements_at_once, query


def test_a_read_waits_for_its_embedding_no_longer_than_its_deadline(bruno, alongside, monkeypatch, settings):
    private_fragment(bruno, "The VPN config lives in the ops vault under vpn/prod.")
    settings.MEMORYHUB_SEARCH_DEADLINE_SECONDS = 0.5
    released, finished = threading.Event(), threading.Event()
    real = search._embed

    def stuck(texts):
        released.wait(WAIT_SECONDS)
        finished.set()
        return real(texts)

    monkeypatch.setattr(search, "_embed", stuck)
    receipts = Receipt.objects.count()
    try:
        with pytest.raises(DeadlineExceeded) as caught:
            fragments_search(caller=bruno, query="where is the VPN config?")
        # Told while the encoder still runs: the read did not wait for it.
        assert not finished.is_set()
    finally:
        released.set()
    assert "0.5 s deadline" in caught.value.message
    assert Receipt.objects.count() == receipts


def test_the_embedding_runs_while_the_first_statement_does(bruno, alongside, monkeypatch):
    """The encoder here waits for the search's first statement (index_settings'
    prologue) to have run: embedded at once, before it, the search would never
    get there."""
    private_fragment(bruno, "The VPN config lives in the ops vault under vpn/prod.")
    first_statement_ran = threading.Event()
    real = search._embed
    waited: list[bool] = []

    def embed_after_the_first_statement(texts):
        waited.append(first_statement_ran.wait(WAIT_SECONDS))
        return real(texts)

    def noting(execute, sql, params, many, context):
        result = execute(sql, params, many, context)
        if "jsonb_build_array(judgment_plane" in sql:  # the prologue reads the workspace's settings
            first_statement_ran.set()
        return result

    monkeypatch.setattr(search, "_embed", embed_after_the_first_statement)
    with connection.execute_wrapper(noting):
        result = fragments_search(caller=bruno, query="where is the VPN config?")
    assert waited == [True]
    assert result.hits


def test_the_statement_compiled_before_the_vector_is_the_one_compiled_with_it(bruno, alongside):
    """What reaches PostgreSQL is what lexical_scored compiles and sends with
    the vector known from the start (the vector pool's query as Django
    compiles it with the vector), and never the slot's marker."""
    private_fragment(bruno, "The VPN config lives in the ops vault under vpn/prod.")
    query = "where is the VPN config?"
    (vector,) = search._embed([query])
    with CaptureQueriesContext(connection) as captured:
        fragments_search(caller=bruno, query=query)
    both_pools = [s for s in _statements(captured) if "<=>" in s and "@@" in s]
    assert len(both_pools) == 1
    assert not any("vector to come" in q["sql"] for q in captured.captured_queries)

    policy = access.read_policy(caller=bruno, as_of=timezone.now())
    read_query = search.read_query_for(query, vector, search.RANKING)
    with CaptureQueriesContext(connection) as direct, transaction.atomic():
        search.lexical_scored(search.index_filter(policy), read_query, search.candidate_pool(10), search.RANKING,
                              vector=read_query.vector, tallied=search.tallied_statistics(policy))
    assert both_pools == [s for s in _statements(direct) if "<=>" in s and "@@" in s]
    assert vector_text(vector) in both_pools[0]

    # The slot stands where the vector's text stands, and only there.
    slot = search._VectorSlot()
    with_slot, slot_params = search._sql(search._nearest(search.index_filter(policy), slot, 10))
    with_vector, vector_params = search._sql(search._nearest(search.index_filter(policy),
                                                             search.QueryVector(vector), 10))
    assert with_slot == with_vector
    assert [search.QueryVector(vector).to_text() if value is slot.marker else value
            for value in slot_params] == list(vector_params)


def test_an_embedding_that_fails_on_its_thread_is_logged_with_the_request(bruno, alongside, monkeypatch):
    private_fragment(bruno, "The VPN config lives in the ops vault under vpn/prod.")

    monkeypatch.setattr(search, "get_embedder", Broken)

    class Lines(logging.Handler):
        """Formats each record as it is emitted, on the thread that emits it, as the product's handlers do."""

        def __init__(self) -> None:
            super().__init__(logging.ERROR)
            self.setFormatter(JsonFormatter())
            self.lines: list[tuple[str, dict]] = []

        def emit(self, record: logging.LogRecord) -> None:
            self.lines.append((record.threadName, json.loads(self.format(record))))

    lines = Lines()
    search.logger.addHandler(lines)
    token = REQUEST_ID.set("req-alongside-1")
    try:
        result = fragments_search(caller=bruno, query="where is the VPN config?")
    finally:
        REQUEST_ID.reset(token)
        search.logger.removeHandler(lines)
    assert result.hits  # lexically
    failures = [(thread, line) for thread, line in lines.lines if "query embedding failed" in line["message"]]
    assert len(failures) == 1
    thread, line = failures[0]
    assert thread.startswith("memoryhub-embed")
    assert line["request_id"] == "req-alongside-1"


def test_a_forked_process_embeds_on_threads_of_its_own():
    """A process forked after searching (a Celery worker's prefork pool, say) does not wait on its parent's
    threads: the pool's state it inherits would have it queue work for a thread that is not there."""
    assert search._embedding_pool().submit(lambda: "parent").result(timeout=WAIT_SECONDS) == "parent"
    child = os.fork()
    if child == 0:  # pragma: no cover - the child's own exit code is the assertion
        try:
            if search._pool is not None:
                os._exit(3)  # the parent's pool, whose threads are not here
            answer = search._embedding_pool().submit(lambda: "child").result(timeout=WAIT_SECONDS)
            os._exit(0 if answer == "child" else 1)
        except BaseException:  # noqa: BLE001
            os._exit(2)
    deadline = time.monotonic() + WAIT_SECONDS * 2
    while (ended := os.waitpid(child, os.WNOHANG))[0] == 0:
        if time.monotonic() > deadline:
            os.kill(child, signal.SIGKILL)
            os.waitpid(child, 0)
            pytest.fail("the forked process never answered")
        time.sleep(0.05)
    assert os.waitstatus_to_exitcode(ended[1]) == 0
