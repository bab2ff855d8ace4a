"""memory_receipt: replay your own receipts under today's rights (decision 10)."""

from __future__ import annotations

import datetime as dt
import os
import re
import subprocess
import sys
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import asdict, replace

import pytest
from django.utils import timezone

from memoryhub.errors import NotFound, PermissionDenied
from memoryhub.mcp_adapter.render import receipt_output, search_output
from memoryhub.models import Fragment, Membership, Receipt
from memoryhub.services import receipts, search
from memoryhub.services.receipts import receipt_replay
from memoryhub.services.search import fragments_search
from tests.memory.conftest import private_fragment

RECEIPT_FIELDS = {"receipt_id", "query", "as_of", "agents", "roles", "reader", "served_then", "served_now",
                  "missing_now", "extra_now", "replayed", "note", "replayed_as_of", "chain",
                  "grounding_changes"}


@pytest.fixture
def bruno(people):
    return people.caller(people.bruno)


def test_replaying_an_unchanged_read_serves_the_same(bruno, shared_fragment):
    fragment = shared_fragment("Rotate the TLS certificates every quarter.")
    read = search_output(fragments_search(caller=bruno, query="TLS certificates", agents=["wiki"]))
    replay = receipt_output(receipt_replay(caller=bruno, receipt_id=read["receipt_id"]))
    assert set(replay) == RECEIPT_FIELDS
    assert replay["receipt_id"] == read["receipt_id"]
    assert replay["query"] == "TLS certificates" and replay["agents"] == ["wiki"]
    assert replay["roles"] == ["engineering"] and replay["reader"] == "bruno"
    assert replay["as_of"] == read["as_of"]
    assert replay["served_then"] == replay["served_now"] == [str(fragment.pk)]
    assert replay["missing_now"] == replay["extra_now"] == []
    assert replay["replayed"] is True
    assert "as of now" in replay["note"]


def test_an_implicit_as_of_is_replayed_as_now(bruno):
    old = private_fragment(bruno, "The office wifi is called Acme-Guest.")
    read = fragments_search(caller=bruno, query="office wifi name")
    new = private_fragment(bruno, "The office wifi is called Acme-Visitors.")
    Fragment.objects.filter(pk=old.pk).update(retired_at=new.recorded_at, retired_reason="superseded")
    replay = receipt_replay(caller=bruno, receipt_id=read.receipt_id)
    assert replay.served_then == [str(old.pk)]
    assert replay.served_now == [str(new.pk)]
    assert replay.missing_now == [str(old.pk)] and replay.extra_now == [str(new.pk)]
    assert replay.replayed_as_of > read.as_of


def test_an_explicit_as_of_is_kept(bruno):
    old = private_fragment(bruno, "The office wifi is called Acme-Guest.",
                           recorded_at=timezone.now() - dt.timedelta(days=2))
    instant = timezone.now() - dt.timedelta(days=1)
    read = fragments_search(caller=bruno, query="office wifi name", as_of=instant)
    private_fragment(bruno, "The office wifi password changes monthly.")
    replay = receipt_replay(caller=bruno, receipt_id=read.receipt_id)
    assert replay.served_then == replay.served_now == [str(old.pk)]
    assert replay.replayed_as_of == replay.receipt.as_of == instant and replay.note is None


def test_replay_uses_todays_rights(people, shared_fragment):
    cleo = people.caller(people.cleo)
    runbook = shared_fragment("Rotate the TLS certificates every quarter.")
    read = fragments_search(caller=cleo, query="TLS certificates")
    assert read.served_ids == [str(runbook.pk)]
    Membership.objects.get(user=people.cleo).roles.clear()
    replay = receipt_replay(caller=cleo, receipt_id=read.receipt_id)
    assert replay.receipt.roles == ["engineering"]  # the audience of the original read
    assert replay.served_now == [] and replay.missing_now == [str(runbook.pk)]


def test_someone_elses_receipt_answers_exactly_like_an_unknown_one(people, bruno):
    private_fragment(bruno, "My favourite editor is Vim.")
    mine = fragments_search(caller=bruno, query="editor").receipt_id
    theirs = fragments_search(caller=people.caller(people.cleo), query="editor").receipt_id
    other_tenant = fragments_search(caller=people.caller(people.olga), query="editor").receipt_id
    assert receipt_replay(caller=bruno, receipt_id=mine).replayed

    def refusal(receipt_id: str) -> tuple:
        with pytest.raises(NotFound) as caught:
            receipt_replay(caller=bruno, receipt_id=receipt_id)
        return type(caught.value), caught.value.code, caught.value.message, caught.value.field, caught.value.status

    unknown = refusal("rcpt_" + "x" * 24)
    assert refusal(theirs) == unknown
    assert refusal(other_tenant) == unknown
    # The admin is no exception.
    with pytest.raises(NotFound):
        receipt_replay(caller=people.caller(people.ada), receipt_id=mine)


def test_receipt_ids_are_random(bruno):
    ids = {fragments_search(caller=bruno, query="editor").receipt_id for _ in range(5)}
    assert len(ids) == 5
    assert all(len(i) == len("rcpt_") + 24 for i in ids)


def test_agents_cannot_reopen_receipts(people):
    bot = people.caller(people.triage_bot)
    read = fragments_search(caller=bot, query="editor")
    with pytest.raises(PermissionDenied):
        receipt_replay(caller=bot, receipt_id=read.receipt_id)


def test_a_replay_that_cannot_run_says_why(bruno, monkeypatch):
    private_fragment(bruno, "My favourite editor is Vim.")
    read = fragments_search(caller=bruno, query="editor")

    def too_slow(**kwargs):
        raise search.Deadline(0.1).exceeded()

    monkeypatch.setattr(receipts, "search_execute", too_slow)
    replay = receipt_replay(caller=bruno, receipt_id=read.receipt_id)
    assert replay.replayed is False
    assert "could not be re-executed" in replay.note and "deadline" in replay.note
    assert replay.served_then == read.served_ids
    assert replay.served_now == []


# BM25 without length normalisation puts the long page that says "zanzibar" three times first; with full
# normalisation the short line wins. Full-text only, so the order depends on the ranking's parameters alone.
READ_RANKING = replace(search.RANKING, fusion="lexical", bm25_k1=2.0, bm25_b=0.0)
TODAYS_RANKING = replace(READ_RANKING, bm25_b=1.0)


def two_orders(bruno):  # type: ignore[no-untyped-def]
    long = private_fragment(bruno, "Zanzibar zanzibar zanzibar: the ferry timetable, the harbour fees, the customs "
                                   "forms, the spice market hours, the hotel list, the taxi ranks and the museum.")
    short = private_fragment(bruno, "Zanzibar in June.")
    return long, short


def test_a_replay_ranks_with_the_parameters_the_read_was_ranked_with(bruno, monkeypatch):
    long, short = two_orders(bruno)
    monkeypatch.setattr(search, "RANKING", READ_RANKING)
    read = fragments_search(caller=bruno, query="zanzibar", limit=1, as_of=timezone.now())
    assert read.served_ids == [str(long.pk)]
    assert Receipt.objects.get(pk=read.receipt_id).ranking == search.ranking_record(READ_RANKING)
    # Search's weights change; the formulas do not.
    monkeypatch.setattr(search, "RANKING", TODAYS_RANKING)
    assert fragments_search(caller=bruno, query="zanzibar", limit=1).served_ids == [str(short.pk)]
    replay = receipt_replay(caller=bruno, receipt_id=read.receipt_id)
    assert replay.served_now == [str(long.pk)] and replay.missing_now == replay.extra_now == []
    assert replay.note is None


def test_a_replay_after_the_ranking_code_changed_says_its_differences_may_be_the_ranking(bruno, monkeypatch):
    long, short = two_orders(bruno)
    monkeypatch.setattr(search, "RANKING", READ_RANKING)
    read = fragments_search(caller=bruno, query="zanzibar", limit=1)
    monkeypatch.setattr(search, "RANKING", TODAYS_RANKING)
    monkeypatch.setattr(search, "ordering_code_digest", lambda: "the scoring code, edited")
    replay = receipt_replay(caller=bruno, receipt_id=read.receipt_id)
    assert replay.replayed is True
    assert replay.served_now == [str(short.pk)] and replay.missing_now == [str(long.pk)]
    assert replay.note == f"{receipts.NOTE_IMPLICIT_AS_OF} {receipts.NOTE_RANKING_CHANGED}"
    assert "moved in the order" in receipt_output(replay)["note"]


def test_a_replay_of_a_read_from_before_receipts_kept_their_ranking_says_so(bruno, monkeypatch):
    long, _ = two_orders(bruno)
    read = fragments_search(caller=bruno, query="zanzibar", as_of=timezone.now())
    Receipt.objects.filter(pk=read.receipt_id).update(ranking={})
    replay = receipt_replay(caller=bruno, receipt_id=read.receipt_id)
    assert replay.replayed is True and replay.note == receipts.NOTE_RANKING_UNKNOWN
    # The chain does not cover the ranking: the entry still verifies.
    assert replay.chain.verifies


def recorded(**parameters):  # type: ignore[no-untyped-def]
    return {"revision": search.ranking_revision(), "parameters": {**asdict(search.RANKING), **parameters}}


@pytest.mark.parametrize("record", [
    lambda: None,
    lambda: {},
    lambda: {**recorded(), "revision": "0-000000000000"},  # made by other formulas
    lambda: {**recorded(), "parameters": None},
    lambda: {**recorded(), "parameters": {"fusion": "weighted"}},  # fields missing
    lambda: recorded(retired_knob=1),  # a field this code does not have
    lambda: recorded(bm25_k1="high"),
    lambda: recorded(vector_weight=True),
    lambda: recorded(rrf_k=True),
    lambda: recorded(rrf_k=60.5),
    lambda: recorded(fusion="magic"),
    # A row edited outside the product (the record is not in the chain) must not break a replay.
    lambda: recorded(vector_weight=-0.3),
    lambda: recorded(bm25_k1=float("inf")),
    lambda: recorded(neighbour_weight=float("nan")),
    lambda: recorded(vector_weight=0, lexical_weight=0),
    lambda: recorded(hedged_vector_weight=1.5),  # a share of the cosine past all of it
])
def test_a_recorded_ranking_this_code_cannot_make_again_is_none(record):
    assert search.ranking_of_record(record()) is None


def test_a_recorded_ranking_is_made_again_with_whole_numbers_for_weights():
    assert search.ranking_of_record(search.ranking_record(search.RANKING)) == search.RANKING
    assert search.ranking_of_record(recorded(vector_weight=1, lexical_weight=0)) == replace(
        search.RANKING, vector_weight=1.0, lexical_weight=0.0)


def test_the_ranking_revision_follows_what_decides_an_order_besides_the_parameters(monkeypatch, settings):
    revision = search.ranking_revision()
    assert search.ranking_revision() == revision
    changes = [
        ("MATCH_THRESHOLD", search.MATCH_THRESHOLD + 0.01),
        ("ordering_code_digest", lambda: "the scoring code, edited"),
        ("QUESTION_FORM_WORDS", re.compile(search.QUESTION_FORM_WORDS.pattern)),  # its flags dropped
    ]
    for name, value in changes:
        with monkeypatch.context() as patch:
            patch.setattr(search, name, value)
            assert search.ranking_revision() != revision, name
    assert search.ranking_revision() == revision
    ef_search = search.hnsw_ef_search()
    settings.MEMORYHUB_HNSW_EF_SEARCH = ef_search + 1
    assert search.ranking_revision() != revision
    settings.MEMORYHUB_HNSW_EF_SEARCH = ef_search
    settings.MEMORYHUB_EMBEDDER = "memoryhub.embeddings.MiniLMOnnxInt8Embedder"
    assert search.ranking_revision() != revision


def test_the_ordering_code_digest_reads_every_function_it_names():
    assert all(callable(getattr(search, name)) for name in search.ORDERING_CODE)
    assert search.ordering_code_digest() == search._ordering_code_digest()


def test_the_ordering_code_digest_is_worked_out_once_by_one_thread_however_many_ask_at_once(monkeypatch):
    """A server worker's first searches come at once, and reading the source
    in several threads at once failed a search now and then (CPython's parser)."""
    real = search._ordering_code_digest
    guard = threading.Lock()
    inside, most, calls = 0, 0, 0

    def counted() -> str:
        nonlocal inside, most, calls
        with guard:
            inside, calls = inside + 1, calls + 1
            most = max(most, inside)
        try:
            time.sleep(0.05)  # long enough for every other thread to arrive
            return real()
        finally:
            with guard:
                inside -= 1

    monkeypatch.setattr(search, "_ordering_code_digest", counted)
    monkeypatch.setattr(search, "_digest", None)
    together = threading.Barrier(8)

    def ask(_: int) -> str:
        together.wait(timeout=30)
        return search.ordering_code_digest()

    with ThreadPoolExecutor(max_workers=8) as threads:
        digests = list(threads.map(ask, range(8)))
    assert (calls, most) == (1, 1)
    assert set(digests) == {real()}


def test_the_ordering_code_digest_reads_compiled_code_where_the_source_is_not_deployed(monkeypatch):
    """Functions and classes (RowCheckStatement, QueryVector) alike, so a
    deployment without sources still records a ranking revision."""
    assert any(isinstance(getattr(search, name), type) for name in search.ORDERING_CODE)

    def no_source(item):
        raise OSError("no source deployed")

    monkeypatch.setattr(search.inspect, "getsource", no_source)
    compiled = search._ordering_code_digest()
    assert compiled == search._ordering_code_digest()
    # The same in other processes, whatever order their sets of strings are in.
    script = ("import inspect, django; django.setup(); from memoryhub.services import search\n"
              "def no_source(item): raise OSError\n"
              "inspect.getsource = no_source; print(search.ordering_code_digest())")
    for seed in ("1", "2"):
        run = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=120, check=True,
                             env={**os.environ, "PYTHONHASHSEED": seed, "DJANGO_SETTINGS_MODULE": "memoryhub.settings"})
        assert run.stdout.strip() == compiled, run.stderr
    # A method's code takes part in it, and so does a plain value of a class.
    monkeypatch.setattr(search.RowCheckStatement, "with_scores", lambda self, scores: None)
    edited = search._ordering_code_digest()
    assert edited != compiled
    monkeypatch.setattr(search.RowCheckStatement, "zoned", (0,))
    assert search._ordering_code_digest() != edited
