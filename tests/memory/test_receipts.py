"""memory_receipt: replay your own receipts under today's rights (decision 10)."""

from __future__ import annotations

import datetime as dt

import pytest
from django.utils import timezone

from memoryhub.errors import NotFound, PermissionDenied
from memoryhub.mcp_adapter.render import receipt_output, search_output
from memoryhub.models import Fragment, Membership
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
