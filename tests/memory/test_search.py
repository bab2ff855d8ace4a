"""memory_search: hybrid retrieval, filters, abstention, notices, judgment plane,
budgets, receipts and the deadline."""

from __future__ import annotations

import datetime as dt
import json

import pytest
from django.db import connection
from django.test.utils import CaptureQueriesContext
from django.utils import timezone

from memoryhub.errors import DeadlineExceeded
from memoryhub.models import EnforcementAlarm, Fragment, Receipt
from memoryhub.services import search
from memoryhub.services.search import memory_search
from tests.memory.conftest import private_fragment

FRAGMENT_FIELDS = {"id", "value", "value_truncated", "confidence", "grounding_status", "created_at", "agents",
                   "resources", "score"}


def _ids(result) -> list[str]:
    return [f["id"] for f in result["fragments"]]


def test_it_returns_every_output_field(acme, shared_fragment):
    fragment = shared_fragment(
        "To restart the payments service run kubectl rollout restart deploy/payments.",
        created_at=dt.datetime(2026, 1, 5, 9, 30, tzinfo=dt.UTC),
        resources=[{"id": "wiki-42", "title": "Payments runbook", "uri": "https://wiki.example/payments"}],
    )
    result = memory_search(caller=acme.owner, query="how do I restart the payments service?")
    assert set(result) == {"fragments", "receipt_id", "as_of", "abstained", "abstain_reason", "truncated", "notice"}
    assert result["abstained"] is False and result["truncated"] is False and result["notice"] is None
    (served,) = result["fragments"]
    assert set(served) == FRAGMENT_FIELDS
    assert served["id"] == str(fragment.pk)
    assert served["value"] == fragment.value and served["value_truncated"] is False
    assert served["grounding_status"] == "grounded"
    assert served["created_at"] == "2026-01-05T09:30:00Z"  # the source's time, not ours
    assert served["agents"] == ["wiki"]
    assert served["resources"] == [{"id": "wiki-42", "title": "Payments runbook", "uri": "https://wiki.example/payments"}]
    assert 0 < served["score"] <= 1
    assert result["receipt_id"].startswith("rcpt_")
    json.dumps(result)  # plain JSON types only


def test_fragments_not_yet_embedded_are_found_lexically(acme):
    fragment = private_fragment(acme.owner, "The Grafana dashboard for checkout latency is called Checkout SLO.",
                                embed=False)
    assert fragment.embedding is None
    assert _ids(memory_search(caller=acme.owner, query="checkout latency dashboard")) == [str(fragment.pk)]


def test_it_finds_paraphrases_through_the_vector_index(acme):
    fragment = private_fragment(acme.owner, "My daughter's school pickup is at half past three on weekdays.")
    result = memory_search(caller=acme.owner, query="when do I collect my kid from class?")
    assert _ids(result)[:1] == [str(fragment.pk)]


def test_it_answers_lexically_when_the_embedder_fails(acme, monkeypatch):
    fragment = private_fragment(acme.owner, "The VPN config lives in the ops vault under vpn/prod.")

    def broken(texts):
        raise RuntimeError("embedder down")

    monkeypatch.setattr(search, "_embed", lambda texts: None)
    assert _ids(memory_search(caller=acme.owner, query="where is the VPN config?")) == [str(fragment.pk)]


def test_both_index_queries_carry_the_visibility_predicate(acme):
    private_fragment(acme.owner, "The VPN config lives in the ops vault.")
    with CaptureQueriesContext(connection) as captured:
        memory_search(caller=acme.owner, query="VPN config vault")
    sql = [q["sql"] for q in captured.captured_queries]
    vector = [s for s in sql if "<=>" in s and "ORDER BY" in s and "LIMIT" in s and "IN (SELECT" not in s]
    lexical = [s for s in sql if "@@" in s and "ORDER BY" in s]
    assert vector and lexical
    for statement in vector + lexical:
        # (the lexical query applies it in its bounded match subquery, aliased U0)
        assert '"tenant_id" =' in statement
        assert '"owner_user_id" =' in statement
        assert '"recorded_at" <=' in statement
        assert '"retired_at" IS NULL' in statement
    assert any("hnsw.iterative_scan" in s and "relaxed_order" in s for s in sql)
    assert any("statement_timeout" in s for s in sql)


def test_filters_narrow_the_result(acme, shared_fragment):
    jan = shared_fragment("Deploy freeze notes for January.", created_at=dt.datetime(2026, 1, 10, tzinfo=dt.UTC),
                          resources=[{"id": "freeze-doc", "title": "Freeze"}])
    jun = shared_fragment("Deploy freeze notes for June.", created_at=dt.datetime(2026, 6, 10, tzinfo=dt.UTC))
    mine = private_fragment(acme.owner, "My deploy freeze notes are in my notebook.")
    feb = dt.datetime(2026, 2, 1, tzinfo=dt.UTC)
    query = "deploy freeze notes"
    assert set(_ids(memory_search(caller=acme.owner, query=query))) == {str(jan.pk), str(jun.pk), str(mine.pk)}
    assert str(jan.pk) not in _ids(memory_search(caller=acme.owner, query=query, created_after=feb))
    assert str(jun.pk) not in _ids(memory_search(caller=acme.owner, query=query, created_before=feb))
    assert _ids(memory_search(caller=acme.owner, query=query, resource_ids=["freeze-doc"])) == [str(jan.pk)]
    assert set(_ids(memory_search(caller=acme.owner, query=query, agents=["wiki"]))) == {str(jan.pk), str(jun.pk)}
    assert _ids(memory_search(caller=acme.owner, query=query, limit=1)) == _ids(
        memory_search(caller=acme.owner, query=query))[:1]


def test_as_of_reads_the_past_and_a_future_instant_is_now(acme):
    t0 = timezone.now() - dt.timedelta(days=3)
    old = private_fragment(acme.owner, "The office wifi network is called Acme-Guest.", recorded_at=t0)
    new = private_fragment(acme.owner, "The office wifi network is called Acme-Visitors.")
    Fragment.objects.filter(pk=old.pk).update(retired_at=new.recorded_at, retired_reason="superseded")
    assert _ids(memory_search(caller=acme.owner, query="office wifi network name",
                              as_of=t0 + dt.timedelta(hours=1))) == [str(old.pk)]
    assert _ids(memory_search(caller=acme.owner, query="office wifi network name")) == [str(new.pk)]
    future = timezone.now() + dt.timedelta(days=365)
    result = memory_search(caller=acme.owner, query="office wifi network name", as_of=future)
    assert dt.datetime.fromisoformat(result["as_of"].replace("Z", "+00:00")) <= timezone.now()
    assert Receipt.objects.get(pk=result["receipt_id"]).as_of < future


def test_the_same_read_gives_the_same_answer(acme, shared_fragment):
    for n in range(12):
        shared_fragment(f"Runbook step {n}: check the queue depth of worker pool {n}.")
    first = memory_search(caller=acme.owner, query="queue depth worker pool", limit=20)
    second = memory_search(caller=acme.owner, query="queue depth worker pool", limit=20)
    assert first["fragments"] == second["fragments"]


# --------------------------------------------------------------------------- empty results and abstention


def test_the_notice_tells_nothing_visible_from_nothing_matched(acme, shared_fragment):
    nothing_visible = memory_search(caller=acme.owner, query="payments restart")
    assert nothing_visible["fragments"] == [] and nothing_visible["abstained"] is False
    assert nothing_visible["notice"] == search.NOTICE_NOTHING_VISIBLE

    shared_fragment("Customer Initech renews in March.", "accounts")  # visible to sales, not to olivia
    assert memory_search(caller=acme.owner, query="Initech renewal")["notice"] == search.NOTICE_NOTHING_VISIBLE

    private_fragment(acme.owner, "My favourite editor is Vim.")
    filtered = memory_search(caller=acme.owner, query="editor", created_after=timezone.now())
    assert filtered["fragments"] == []
    assert filtered["notice"] == search.NOTICE_NOTHING_MATCHED_FILTERS
    nothing_matched = memory_search(caller=acme.owner, query="quarterly tax filing deadline for the Berlin office")
    assert nothing_matched["fragments"] == []
    assert nothing_matched["notice"] == search.NOTICE_NOTHING_MATCHED


def test_it_abstains_below_the_workspace_relevance_floor(acme):
    private_fragment(acme.owner, "My favourite editor is Vim.")
    assert memory_search(caller=acme.owner, query="favourite editor")["fragments"]
    acme.tenant.relevance_floor = 0.99
    acme.tenant.save()
    result = memory_search(caller=acme.owner, query="favourite editor")
    assert result["fragments"] == [] and result["abstained"] is True
    assert "relevance floor of 0.99" in result["abstain_reason"]
    assert result["notice"] == search.NOTICE_ABSTAINED
    receipt = Receipt.objects.get(pk=result["receipt_id"])
    assert receipt.abstained is True and receipt.served == []


# --------------------------------------------------------------------------- judgment plane


def test_task_arranges_the_result_only_when_the_judgment_plane_is_on(acme, shared_fragment):
    incident = shared_fragment("Database failover: promote the replica and repoint the payments service.",
                               "incidents")
    runbook = shared_fragment("Database maintenance: vacuum the payments tables every Sunday.")
    query = "payments database"
    plain = _ids(memory_search(caller=acme.owner, query=query))
    assert set(plain) == {str(incident.pk), str(runbook.pk)}
    kwargs = {"task": "incident response", "task_tags": ["incidents", "failover"]}
    # Off: task and tags are ignored.
    assert _ids(memory_search(caller=acme.owner, query=query, **kwargs)) == plain

    acme.tenant.judgment_plane = True
    acme.tenant.save()
    for_incident = _ids(memory_search(caller=acme.owner, query=query, **kwargs))
    for_maintenance = _ids(memory_search(caller=acme.owner, query=query, task="weekly maintenance",
                                         task_tags=["vacuum", "sunday"]))
    assert for_incident[0] == str(incident.pk)
    assert for_maintenance[0] == str(runbook.pk)
    # Arranging never changes which fragments are visible or served.
    assert set(for_incident) == set(for_maintenance) == set(plain)


def test_task_tags_never_widen_visibility(acme, shared_fragment):
    account = shared_fragment("Initech is an incident-prone account.", "accounts")
    acme.tenant.judgment_plane = True
    acme.tenant.save()
    result = memory_search(caller=acme.owner, query="incident account", task="accounts",
                           task_tags=["accounts", "initech"])
    assert str(account.pk) not in _ids(result)


# --------------------------------------------------------------------------- budgets


def test_a_long_value_is_clipped_to_4_kib_on_a_character_boundary(acme):
    value = "Runbook: " + "é" * 3000  # 6009 bytes; 4096 falls inside a two-byte character
    fragment = private_fragment(acme.owner, value)
    (served,) = memory_search(caller=acme.owner, query="runbook")["fragments"]
    assert served["id"] == str(fragment.pk)
    assert served["value_truncated"] is True
    encoded = served["value"].encode("utf-8")
    assert len(encoded) <= 4096 and len(encoded) >= 4095
    assert value.startswith(served["value"])


def test_the_whole_result_stays_inside_128_kib(acme):
    for n in range(40):
        private_fragment(acme.owner, f"Capacity note {n}: " + "the cluster needs more disk. " * 160, embed=False)
    result = memory_search(caller=acme.owner, query="capacity cluster disk", limit=50)
    size = len(json.dumps(result, ensure_ascii=False, separators=(",", ":")).encode("utf-8"))
    assert size <= 128 * 1024
    assert result["truncated"] is True
    assert 25 <= len(result["fragments"]) < 40
    assert all(f["value_truncated"] for f in result["fragments"])
    # The receipt records what was actually served.
    assert Receipt.objects.get(pk=result["receipt_id"]).served == _ids(result)


# --------------------------------------------------------------------------- receipts and deadline


def test_every_search_records_its_receipt(acme, shared_fragment):
    shared_fragment("Rotate the TLS certificates every quarter.")
    result = memory_search(caller=acme.owner, query="TLS certificates", agents=["wiki"], limit=5)
    receipt = Receipt.objects.get(pk=result["receipt_id"])
    assert receipt.reader_user == acme.owner.user and receipt.principal_kind == "user"
    assert receipt.subject == "user:olivia" and receipt.roles == ["engineering"]
    assert receipt.request["query"] == "TLS certificates" and receipt.request["agents"] == ["wiki"]
    assert receipt.request["limit"] == 5 and receipt.as_of_explicit is False
    assert receipt.served == _ids(result)


def test_the_receipt_is_written_in_the_reads_transaction(acme, monkeypatch):
    from django.db.models import Q

    private_fragment(acme.member, "Theo's note about TLS certificates.")
    monkeypatch.setattr(search, "index_filter", lambda policy: Q())  # provoke an alarm inside the read

    def fail(**kwargs):
        raise RuntimeError("receipt storage failed")

    monkeypatch.setattr(Receipt.objects, "create", fail)
    with pytest.raises(RuntimeError):
        memory_search(caller=acme.owner, query="TLS certificates")
    # The alarm written earlier in the same transaction went with it: nothing half-recorded.
    assert not EnforcementAlarm.objects.exists()


def test_a_slow_search_is_cancelled_at_its_deadline(acme, monkeypatch, settings):
    private_fragment(acme.owner, "The VPN config lives in the ops vault.")
    settings.MEMORYHUB_SEARCH_DEADLINE_SECONDS = 0.3

    def slow(*args, **kwargs):
        with connection.cursor() as cursor:
            cursor.execute("SELECT pg_sleep(5)")
        return []

    monkeypatch.setattr(search, "lexical_candidates", slow)
    receipts = Receipt.objects.count()
    with pytest.raises(DeadlineExceeded) as caught:
        memory_search(caller=acme.owner, query="VPN config")
    assert "0.3 s deadline" in caught.value.message
    assert caught.value.code == "deadline_exceeded"
    assert Receipt.objects.count() == receipts
    # The connection is usable afterwards (the aborted savepoint was rolled back).
    assert memory_search(caller=acme.owner, query="VPN config", deadline_seconds=30)["fragments"]


def test_the_reads_planner_settings_do_not_leak_into_the_callers_transaction(acme):
    private_fragment(acme.owner, "The VPN config lives in the ops vault.")

    def current() -> tuple:
        with connection.cursor() as cursor:
            cursor.execute("SELECT current_setting('statement_timeout'), "
                           "current_setting('hnsw.iterative_scan', true)")
            return cursor.fetchone()

    before = current()
    memory_search(caller=acme.owner, query="VPN config")
    after = current()
    assert after[0] == before[0]
    assert after[1] in (before[1], None, "", "off")
