"""memory_search: hybrid retrieval, filters, abstention, notices, judgment plane,
budgets, receipts and the deadline."""

from __future__ import annotations

import datetime as dt
import json

import pytest
from django.db import IntegrityError, connection
from django.test.utils import CaptureQueriesContext
from django.utils import timezone
from pgvector import Vector

from contract.limits import FRAGMENT_VALUE_MAX_BYTES, RESULT_MAX_BYTES
from mcpapi.budget import tool_result_size
from memoryhub.database import vectors
from memoryhub.errors import DeadlineExceeded
from memoryhub.mcp_adapter import render
from memoryhub.models import EnforcementAlarm, Fragment, Receipt
from memoryhub.services import search
from memoryhub.services.search import fragments_search
from tests.memory.conftest import private_fragment

FRAGMENT_FIELDS = {"id", "value", "value_truncated", "confidence", "grounding_status", "created_at", "agents",
                   "resources", "score"}


def _ids(result) -> list[str]:
    return result.served_ids


@pytest.fixture
def bruno(people):
    return people.caller(people.bruno)


def test_it_returns_every_output_field(bruno, shared_fragment):
    fragment = shared_fragment(
        "To restart the payments service run kubectl rollout restart deploy/payments.",
        created_at=dt.datetime(2026, 1, 5, 9, 30, tzinfo=dt.UTC),
        resources=[{"id": "wiki-42", "title": "Payments runbook", "uri": "https://wiki.example/payments"}],
    )
    # The contract's memory_search output, as the MCP adapter renders the domain's result.
    result = render.search_output(fragments_search(caller=bruno, query="how do I restart the payments service?"))
    assert set(result) == {"fragments", "receipt_id", "as_of", "abstained", "abstain_reason", "truncated", "notice"}
    assert result["abstained"] is False and result["truncated"] is False and result["notice"] is None
    (served,) = result["fragments"]
    assert set(served) == FRAGMENT_FIELDS
    assert served["id"] == str(fragment.pk)
    assert served["value"] == fragment.value and served["value_truncated"] is False
    assert served["grounding_status"] == "grounded"
    assert served["created_at"] == "2026-01-05T09:30:00Z"  # the source's time, not ours
    assert served["agents"] == ["wiki"]
    assert served["resources"] == [{"id": "wiki-42", "title": "Payments runbook",
                                    "uri": "https://wiki.example/payments"}]
    assert 0 < served["score"] <= 1
    assert result["receipt_id"].startswith("rcpt_")
    json.dumps(result)  # plain JSON types only


def test_fragments_not_yet_embedded_are_found_lexically(bruno):
    fragment = private_fragment(bruno, "The Grafana dashboard for checkout latency is called Checkout SLO.",
                                embed=False)
    assert fragment.embedding is None
    assert _ids(fragments_search(caller=bruno, query="checkout latency dashboard")) == [str(fragment.pk)]


def test_it_finds_paraphrases_through_the_vector_index(bruno):
    fragment = private_fragment(bruno, "My daughter's school pickup is at half past three on weekdays.")
    result = fragments_search(caller=bruno, query="when do I collect my kid from class?")
    assert _ids(result)[:1] == [str(fragment.pk)]


def test_it_answers_lexically_when_the_embedder_fails(bruno, monkeypatch):
    fragment = private_fragment(bruno, "The VPN config lives in the ops vault under vpn/prod.")

    class Broken:
        def embed(self, texts):
            raise RuntimeError("embedder down")

    monkeypatch.setattr(search, "get_embedder", Broken)
    assert _ids(fragments_search(caller=bruno, query="where is the VPN config?")) == [str(fragment.pk)]


def test_the_query_vector_is_written_once_for_every_statement_that_compares_with_it(bruno, monkeypatch):
    private_fragment(bruno, "The VPN config lives in the ops vault under vpn/prod.")
    query = "where is the VPN config?"
    (vector,) = search._embed([query])
    text = vectors.vector_text(vector)
    written: list[str] = []
    real = vectors.vector_text
    monkeypatch.setattr(vectors, "vector_text", lambda values: written.append(real(values)) or written[-1])
    monkeypatch.setattr(Vector, "to_text", lambda self: pytest.fail("pgvector's own text was written"))
    with CaptureQueriesContext(connection) as queries:
        fragments_search(caller=bruno, query=query)
    assert written == [text]
    # The index statement (the vector pool) and the row check (every candidate's similarity).
    assert len([statement for statement in queries if text in statement["sql"]]) == 2


AS_OF_CLAUSE = '("memoryhub_fragment"."retired_at" IS NULL OR "memoryhub_fragment"."retired_at" >'


@pytest.mark.parametrize("narrowed", [False, True])
def test_both_index_queries_carry_the_visibility_predicate(bruno, narrowed):
    private_fragment(bruno, "The VPN config lives in the ops vault.")
    filters = {"created_after": "2000-01-01T00:00:00Z"} if narrowed else {}
    with CaptureQueriesContext(connection) as captured:
        fragments_search(caller=bruno, query="VPN config vault", **filters)
    sql = [q["sql"] for q in captured.captured_queries]
    # (the row check loads candidates by id and checks each row in Python)
    row_check = '"memoryhub_fragment"."id" IN (\''
    vector = [s for s in sql if "<=>" in s and "ORDER BY" in s and "LIMIT" in s and row_check not in s]
    lexical = [s for s in sql if "@@" in s and "ORDER BY" in s]
    # One statement finds both pools.
    assert len(vector) == 1 and vector == lexical
    # The vector pool and BM25's matches (which give each lexeme's frequency,
    # the newest matches and the vector pool's) each carry the predicate:
    # nothing outside it is counted. N and the mean length are counted under it
    # too for a narrowed read; a person's read that is not narrowed sums them
    # from the tallies of the homes the same rule admits (test_tallies.py).
    tally = '"memoryhub_fragmenttally"."owner_user_id" ='
    assert lexical[0].count(AS_OF_CLAUSE) == (3 if narrowed else 2)
    assert (tally in lexical[0]) is not narrowed
    assert lexical[0].count('"memoryhub_fragmenttally"."tenant_id" =') == (0 if narrowed else 1)
    for statement in vector + lexical:
        assert '"tenant_id" =' in statement
        assert '"owner_user_id" =' in statement
        assert '"recorded_at" <=' in statement
        assert '"retired_at" IS NULL' in statement
    assert any("hnsw.iterative_scan" in s and "relaxed_order" in s for s in sql)


def test_filters_narrow_the_result(bruno, shared_fragment):
    jan = shared_fragment("Deploy freeze notes for January.", created_at=dt.datetime(2026, 1, 10, tzinfo=dt.UTC),
                          resources=[{"id": "freeze-doc", "title": "Freeze"}])
    jun = shared_fragment("Deploy freeze notes for June.", created_at=dt.datetime(2026, 6, 10, tzinfo=dt.UTC))
    mine = private_fragment(bruno, "My deploy freeze notes are in my notebook.")
    feb = dt.datetime(2026, 2, 1, tzinfo=dt.UTC)
    query = "deploy freeze notes"
    assert set(_ids(fragments_search(caller=bruno, query=query))) == {str(jan.pk), str(jun.pk), str(mine.pk)}
    assert str(jan.pk) not in _ids(fragments_search(caller=bruno, query=query, created_after=feb))
    assert str(jun.pk) not in _ids(fragments_search(caller=bruno, query=query, created_before=feb))
    assert _ids(fragments_search(caller=bruno, query=query, resource_ids=["freeze-doc"])) == [str(jan.pk)]
    assert set(_ids(fragments_search(caller=bruno, query=query, agents=["wiki"]))) == {str(jan.pk), str(jun.pk)}
    assert _ids(fragments_search(caller=bruno, query=query, limit=1)) == _ids(
        fragments_search(caller=bruno, query=query))[:1]


def test_as_of_reads_the_past_and_a_future_instant_is_now(bruno):
    t0 = timezone.now() - dt.timedelta(days=3)
    old = private_fragment(bruno, "The office wifi network is called Acme-Guest.", recorded_at=t0)
    new = private_fragment(bruno, "The office wifi network is called Acme-Visitors.")
    Fragment.objects.filter(pk=old.pk).update(retired_at=new.recorded_at, retired_reason="superseded")
    assert _ids(fragments_search(caller=bruno, query="office wifi network name",
                                 as_of=t0 + dt.timedelta(hours=1))) == [str(old.pk)]
    assert _ids(fragments_search(caller=bruno, query="office wifi network name")) == [str(new.pk)]
    future = timezone.now() + dt.timedelta(days=365)
    result = fragments_search(caller=bruno, query="office wifi network name", as_of=future)
    assert result.as_of <= timezone.now()
    assert Receipt.objects.get(pk=result.receipt_id).as_of < future


def test_the_same_read_gives_the_same_answer(bruno, shared_fragment):
    for n in range(12):
        shared_fragment(f"Runbook step {n}: check the queue depth of worker pool {n}.")
    first = fragments_search(caller=bruno, query="queue depth worker pool", limit=20)
    second = fragments_search(caller=bruno, query="queue depth worker pool", limit=20)
    assert first.hits == second.hits
    assert render.search_output(first)["fragments"] == render.search_output(second)["fragments"]


# --------------------------------------------------------------------------- empty results and abstention


def test_the_notice_tells_nothing_visible_from_nothing_matched(bruno, shared_fragment):
    nothing_visible = fragments_search(caller=bruno, query="payments restart")
    assert nothing_visible.hits == [] and nothing_visible.abstained is False
    assert nothing_visible.notice == search.NOTICE_NOTHING_VISIBLE

    shared_fragment("Customer Initech renews in March.", "accounts")  # visible to sales, not to bruno
    assert fragments_search(caller=bruno, query="Initech renewal").notice == search.NOTICE_NOTHING_VISIBLE

    private_fragment(bruno, "My favourite editor is Vim.")
    filtered = fragments_search(caller=bruno, query="editor", created_after=timezone.now())
    assert filtered.hits == []
    assert filtered.notice == search.NOTICE_NOTHING_MATCHED_FILTERS
    nothing_matched = fragments_search(caller=bruno, query="quarterly tax filing deadline for the Berlin office")
    assert nothing_matched.hits == []
    assert nothing_matched.notice == search.NOTICE_NOTHING_MATCHED


def test_it_abstains_below_the_workspace_relevance_floor(bruno):
    private_fragment(bruno, "My favourite editor is Vim.")
    assert fragments_search(caller=bruno, query="favourite editor").hits
    bruno.tenant.relevance_floor = 0.99
    bruno.tenant.save()
    result = fragments_search(caller=bruno, query="favourite editor")
    assert result.hits == [] and result.abstained is True
    assert "relevance floor of 0.99" in result.abstain_reason
    assert result.notice == search.NOTICE_ABSTAINED
    receipt = Receipt.objects.get(pk=result.receipt_id)
    assert receipt.abstained is True and receipt.served == []


# --------------------------------------------------------------------------- judgment plane


def test_task_arranges_the_result_only_when_the_judgment_plane_is_on(bruno, shared_fragment):
    incident = shared_fragment("Database failover: promote the replica and repoint the payments service.",
                               "incidents")
    runbook = shared_fragment("Database maintenance: vacuum the payments tables every Sunday.")
    query = "payments database"
    plain = _ids(fragments_search(caller=bruno, query=query))
    assert set(plain) == {str(incident.pk), str(runbook.pk)}
    kwargs = {"task": "incident response", "task_tags": ["incidents", "failover"]}
    # Off: task and tags are ignored.
    assert _ids(fragments_search(caller=bruno, query=query, **kwargs)) == plain

    bruno.tenant.judgment_plane = True
    bruno.tenant.save()
    for_incident = _ids(fragments_search(caller=bruno, query=query, **kwargs))
    for_maintenance = _ids(fragments_search(caller=bruno, query=query, task="weekly maintenance",
                                            task_tags=["vacuum", "sunday"]))
    assert for_incident[0] == str(incident.pk)
    assert for_maintenance[0] == str(runbook.pk)
    # Arranging never changes which fragments are visible or served.
    assert set(for_incident) == set(for_maintenance) == set(plain)


def test_a_judgment_plane_turned_on_after_the_caller_was_read_still_embeds_the_task(bruno, shared_fragment,
                                                                                    monkeypatch):
    """The task is embedded with the query when the plane was on as the caller
    was read; turned on since, it is embedded once the search reads it on; off,
    it is not embedded at all."""
    from memoryhub.models import Tenant
    from memoryhub.services import search

    shared_fragment("Database failover: promote the replica and repoint the payments service.", "incidents")
    embedded: list[list[str]] = []
    real = search._embed
    monkeypatch.setattr(search, "_embed", lambda texts: embedded.append(list(texts)) or real(texts))

    fragments_search(caller=bruno, query="payments database", task="incident response")
    assert embedded == [["payments database"]]  # the plane is off: the task is not embedded

    Tenant.objects.filter(pk=bruno.tenant.pk).update(judgment_plane=True)
    assert not bruno.tenant.judgment_plane  # as the caller was read
    embedded.clear()
    fragments_search(caller=bruno, query="payments database", task="incident response")
    assert embedded == [["payments database"], ["incident response"]]

    embedded.clear()  # the search read the plane on: next time the task goes with the query
    fragments_search(caller=bruno, query="payments database", task="incident response")
    assert embedded == [["payments database", "incident response"]]


def test_task_tags_never_widen_visibility(bruno, shared_fragment):
    account = shared_fragment("Initech is an incident-prone account.", "accounts")
    bruno.tenant.judgment_plane = True
    bruno.tenant.save()
    result = fragments_search(caller=bruno, query="incident account", task="accounts",
                              task_tags=["accounts", "initech"])
    assert str(account.pk) not in _ids(result)


# --------------------------------------------------------------------------- budgets


def test_a_long_value_is_clipped_to_4_kib_on_a_character_boundary(bruno):
    value = "Runbook: " + "é" * 3000  # 6009 bytes; 4096 falls inside a two-byte character
    fragment = private_fragment(bruno, value)
    result = fragments_search(caller=bruno, query="runbook", budget=render.SEARCH_RESULT_BUDGET)
    # The domain keeps the whole value; the MCP adapter clips what it renders.
    assert result.hits[0].fragment.value == value
    (served,) = render.search_output(result)["fragments"]
    assert served["id"] == str(fragment.pk)
    assert served["value_truncated"] is True
    encoded = served["value"].encode("utf-8")
    assert FRAGMENT_VALUE_MAX_BYTES == 4096
    assert len(encoded) <= 4096 and len(encoded) >= 4095
    assert value.startswith(served["value"])


def test_the_whole_result_stays_inside_128_kib(bruno):
    for n in range(40):
        private_fragment(bruno, f"Capacity note {n}: " + "the cluster needs more disk. " * 160, embed=False)
    query = "capacity cluster disk"
    unbudgeted = fragments_search(caller=bruno, query=query, limit=50)
    assert len(unbudgeted.hits) == 40 and unbudgeted.truncated is False
    result = fragments_search(caller=bruno, query=query, limit=50, budget=render.SEARCH_RESULT_BUDGET)
    output = render.search_output(result)
    # Measured as the MCP layer measures it: the whole tool result on the wire.
    assert RESULT_MAX_BYTES == 128 * 1024
    assert tool_result_size(output) <= RESULT_MAX_BYTES
    assert result.truncated is True and output["truncated"] is True
    shown = len(result.hits)
    # About 4 KiB a clipped fragment, carried twice in a tool result (its text
    # content and its structuredContent): some fifteen fit.
    assert 12 <= shown < 20
    # The leading hits of the same read, as many as fit: one more would not.
    assert result.served_ids == unbudgeted.served_ids[:shown]
    assert tool_result_size(render.search_output(unbudgeted, hits=shown + 1)) > RESULT_MAX_BYTES
    assert all(f["value_truncated"] for f in output["fragments"])
    # The receipt records what was actually served, and the budget it was fitted to.
    receipt = Receipt.objects.get(pk=result.receipt_id)
    assert receipt.served == _ids(result) == [f["id"] for f in output["fragments"]]
    assert receipt.budget == render.SEARCH_RESULT_BUDGET.name
    assert Receipt.objects.get(pk=unbudgeted.receipt_id).budget == ""


# --------------------------------------------------------------------------- receipts and deadline


def test_every_search_records_its_receipt(bruno, shared_fragment):
    shared_fragment("Rotate the TLS certificates every quarter.")
    result = fragments_search(caller=bruno, query="TLS certificates", agents=["wiki"], limit=5)
    receipt = Receipt.objects.get(pk=result.receipt_id)
    assert receipt.reader_user == bruno.user and receipt.principal_kind == "user"
    assert receipt.subject == "user:bruno" and receipt.roles == ["engineering"]
    assert receipt.request["query"] == "TLS certificates" and receipt.request["agents"] == ["wiki"]
    assert receipt.request["limit"] == 5 and receipt.as_of_explicit is False
    assert receipt.served == _ids(result)


def test_the_receipt_is_written_in_the_reads_transaction(people, bruno, monkeypatch):
    from django.db.models import Q

    private_fragment(people.caller(people.cleo), "Cleo's note about TLS certificates.")
    fragments_search(caller=bruno, query="anything")
    taken = Receipt.objects.filter(tenant=bruno.tenant).values_list("pk", flat=True).get()
    monkeypatch.setattr(search, "index_filter", lambda policy: Q())  # provoke an alarm inside the read
    # The receipt cannot be stored: its id is taken.
    monkeypatch.setattr(search, "new_receipt_id", lambda: taken)
    with pytest.raises(IntegrityError):
        fragments_search(caller=bruno, query="TLS certificates")
    # The alarm written earlier in the same transaction went with it: nothing half-recorded.
    assert not EnforcementAlarm.objects.exists()


def test_a_slow_search_is_cancelled_at_its_deadline(bruno, monkeypatch, settings):
    private_fragment(bruno, "The VPN config lives in the ops vault.")
    settings.MEMORYHUB_SEARCH_DEADLINE_SECONDS = 0.3

    def slow(*args, **kwargs):
        with connection.cursor() as cursor:
            cursor.execute("SELECT pg_sleep(5)")
        return search.LexicalScores(pool=[], ranked=[], scores={})

    monkeypatch.setattr(search, "lexical_scored", slow)
    receipts = Receipt.objects.count()
    with pytest.raises(DeadlineExceeded) as caught:
        fragments_search(caller=bruno, query="VPN config")
    assert "0.3 s deadline" in caught.value.message
    assert caught.value.code == "deadline_exceeded"
    assert Receipt.objects.count() == receipts
    # The connection is usable afterwards (the aborted savepoint was rolled back).
    monkeypatch.undo()
    assert fragments_search(caller=bruno, query="VPN config", deadline_seconds=30).hits


def test_the_reads_planner_settings_do_not_leak_into_the_callers_transaction(bruno):
    private_fragment(bruno, "The VPN config lives in the ops vault.")

    def current() -> tuple:
        with connection.cursor() as cursor:
            cursor.execute("SELECT current_setting('statement_timeout'), "
                           "current_setting('hnsw.iterative_scan', true)")
            return cursor.fetchone()

    before = current()
    fragments_search(caller=bruno, query="VPN config")
    after = current()
    assert after[0] == before[0]
    assert after[1] in (before[1], None, "", "off")
