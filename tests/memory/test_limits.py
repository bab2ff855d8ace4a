"""Every limit of contracts 000/001 at the service boundary: at the bound, and one past it."""

from __future__ import annotations

import datetime as dt

import pytest

from contract import limits
from memoryhub.errors import InvalidArgument, NotFound
from memoryhub.services.fragments import fragment_write
from memoryhub.services.receipts import receipt_replay
from memoryhub.services.search import fragments_search


def _refused(field: str, call) -> InvalidArgument:
    with pytest.raises(InvalidArgument) as caught:
        call()
    assert caught.value.field == field
    assert caught.value.code == "invalid_argument"
    return caught.value


@pytest.fixture
def bruno(people):
    return people.caller(people.bruno)


def test_query_is_1_to_2000_characters(bruno):
    fragments_search(caller=bruno, query="q" * 2000)
    fragments_search(caller=bruno, query="q")
    error = _refused("query", lambda: fragments_search(caller=bruno, query="q" * 2001))
    assert "2000" in error.message
    _refused("query", lambda: fragments_search(caller=bruno, query=""))
    _refused("query", lambda: fragments_search(caller=bruno, query="   \n"))


@pytest.mark.parametrize("limit", [1, 50])
def test_limit_bounds_are_accepted(bruno, limit):
    assert fragments_search(caller=bruno, query="standup", limit=limit).receipt_id


@pytest.mark.parametrize("limit", [0, 51, -1, True, "10", 2.5])
def test_limit_outside_1_to_50_is_refused(bruno, limit):
    _refused("limit", lambda: fragments_search(caller=bruno, query="standup", limit=limit))


def test_limit_defaults_to_10(bruno):
    from memoryhub.models import Receipt

    receipt_id = fragments_search(caller=bruno, query="standup").receipt_id
    assert Receipt.objects.get(pk=receipt_id).request["limit"] == limits.LIMIT_DEFAULT == 10


def test_resource_ids_up_to_32(bruno):
    fragments_search(caller=bruno, query="plan", resource_ids=[f"doc-{i}" for i in range(32)])
    _refused("resource_ids", lambda: fragments_search(
        caller=bruno, query="plan", resource_ids=[f"doc-{i}" for i in range(33)]))
    fragments_search(caller=bruno, query="plan", resource_ids=["d" * 512])
    _refused("resource_ids", lambda: fragments_search(caller=bruno, query="plan", resource_ids=["d" * 513]))
    _refused("resource_ids", lambda: fragments_search(caller=bruno, query="plan", resource_ids="doc-1"))


def test_agents_up_to_16(bruno):
    fragments_search(caller=bruno, query="plan", agents=[f"agent-{i}" for i in range(16)])
    _refused("agents", lambda: fragments_search(
        caller=bruno, query="plan", agents=[f"agent-{i}" for i in range(17)]))
    _refused("agents", lambda: fragments_search(caller=bruno, query="plan", agents=[""]))


def test_task_up_to_200_characters(bruno):
    fragments_search(caller=bruno, query="plan", task="t" * 200)
    _refused("task", lambda: fragments_search(caller=bruno, query="plan", task="t" * 201))


def test_task_tags_up_to_8(bruno):
    fragments_search(caller=bruno, query="plan", task_tags=[f"tag{i}" for i in range(8)])
    _refused("task_tags", lambda: fragments_search(
        caller=bruno, query="plan", task_tags=[f"tag{i}" for i in range(9)]))


def test_dates_must_carry_an_offset_and_be_in_order(bruno):
    _refused("as_of", lambda: fragments_search(caller=bruno, query="plan", as_of=dt.datetime(2026, 1, 1)))
    _refused("created_after", lambda: fragments_search(
        caller=bruno, query="plan", created_after=dt.datetime(2026, 2, 1, tzinfo=dt.UTC),
        created_before=dt.datetime(2026, 1, 1, tzinfo=dt.UTC)))
    _refused("created_before", lambda: fragments_search(caller=bruno, query="plan", created_before="yesterday"))


def test_content_is_up_to_32768_characters_counted_as_characters(bruno):
    sentence = "The quarterly review covers the roadmap. "
    at_limit = (sentence * (limits.CONTENT_MAX_CHARS // len(sentence) + 1))[: limits.CONTENT_MAX_CHARS]
    assert len(at_limit) == 32768
    assert fragment_write(caller=bruno, content=at_limit).results
    error = _refused("content", lambda: fragment_write(caller=bruno, content=at_limit + "x"))
    assert "32768" in error.message
    # Characters, not UTF-8 bytes: 32768 three-byte characters (96 KiB) are within the limit.
    fragment_write(caller=bruno, content="€" * 32768)
    _refused("content", lambda: fragment_write(caller=bruno, content="€" * 32769))
    _refused("content", lambda: fragment_write(caller=bruno, content=" "))


def test_session_id_up_to_128_and_resource_up_to_512(bruno):
    fragment_write(caller=bruno, content="Lunch is at noon.", session_id="s" * 128, resource="r" * 512)
    _refused("session_id", lambda: fragment_write(caller=bruno, content="Lunch is at noon.", session_id="s" * 129))
    _refused("resource", lambda: fragment_write(caller=bruno, content="Lunch is at noon.", resource="r" * 513))


def test_idempotency_key_up_to_256(bruno):
    fragment_write(caller=bruno, content="Lunch is at noon.", idempotency_key="k" * 256)
    _refused("idempotency_key", lambda: fragment_write(
        caller=bruno, content="Lunch is at noon.", idempotency_key="k" * 257))


def test_receipt_id_up_to_256(bruno):
    with pytest.raises(NotFound):
        receipt_replay(caller=bruno, receipt_id="r" * 256)
    _refused("receipt_id", lambda: receipt_replay(caller=bruno, receipt_id="r" * 257))


@pytest.mark.parametrize("unstorable", ["nul \x00 inside", "lone \ud800 surrogate"])
def test_text_postgresql_cannot_store_is_refused_naming_the_field(bruno, unstorable):
    _refused("query", lambda: fragments_search(caller=bruno, query=unstorable))
    _refused("task", lambda: fragments_search(caller=bruno, query="plan", task=unstorable))
    _refused("agents", lambda: fragments_search(caller=bruno, query="plan", agents=[unstorable]))
    _refused("content", lambda: fragment_write(caller=bruno, content=unstorable))
    _refused("session_id", lambda: fragment_write(caller=bruno, content="Lunch is at noon.", session_id=unstorable))
    _refused("receipt_id", lambda: receipt_replay(caller=bruno, receipt_id=unstorable))


@pytest.mark.parametrize("instant", ["0001-01-01T00:00:00+01:00", "9999-12-31T23:59:59-01:00"])
def test_an_instant_outside_what_utc_can_hold_is_refused_naming_the_field(instant):
    from memoryhub.errors import InvalidArgument
    from memoryhub.services.arguments import checked_instant

    with pytest.raises(InvalidArgument) as refused:
        checked_instant(instant, field="as_of")
    assert refused.value.field == "as_of"
