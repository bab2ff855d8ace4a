"""Every limit of contracts 000/001 at the service boundary: at the bound, and one past it."""

from __future__ import annotations

import datetime as dt

import pytest

from memoryhub.errors import InvalidArgument, NotFound
from memoryhub.services import limits
from memoryhub.services.receipts import receipt_replay
from memoryhub.services.search import memory_search
from memoryhub.services.write import memory_write


def _refused(field: str, call) -> InvalidArgument:
    with pytest.raises(InvalidArgument) as caught:
        call()
    assert caught.value.field == field
    assert caught.value.code == "invalid_argument"
    return caught.value


def test_query_is_1_to_2000_characters(acme):
    memory_search(caller=acme.owner, query="q" * 2000)
    memory_search(caller=acme.owner, query="q")
    error = _refused("query", lambda: memory_search(caller=acme.owner, query="q" * 2001))
    assert "2000" in error.message
    _refused("query", lambda: memory_search(caller=acme.owner, query=""))
    _refused("query", lambda: memory_search(caller=acme.owner, query="   \n"))


@pytest.mark.parametrize("limit", [1, 50])
def test_limit_bounds_are_accepted(acme, limit):
    assert memory_search(caller=acme.owner, query="standup", limit=limit)["receipt_id"]


@pytest.mark.parametrize("limit", [0, 51, -1, True, "10", 2.5])
def test_limit_outside_1_to_50_is_refused(acme, limit):
    _refused("limit", lambda: memory_search(caller=acme.owner, query="standup", limit=limit))


def test_limit_defaults_to_10(acme):
    from memoryhub.models import Receipt

    receipt_id = memory_search(caller=acme.owner, query="standup")["receipt_id"]
    assert Receipt.objects.get(pk=receipt_id).request["limit"] == limits.LIMIT_DEFAULT == 10


def test_resource_ids_up_to_32(acme):
    memory_search(caller=acme.owner, query="plan", resource_ids=[f"doc-{i}" for i in range(32)])
    _refused("resource_ids", lambda: memory_search(
        caller=acme.owner, query="plan", resource_ids=[f"doc-{i}" for i in range(33)]))
    memory_search(caller=acme.owner, query="plan", resource_ids=["d" * 512])
    _refused("resource_ids", lambda: memory_search(caller=acme.owner, query="plan", resource_ids=["d" * 513]))
    _refused("resource_ids", lambda: memory_search(caller=acme.owner, query="plan", resource_ids="doc-1"))


def test_agents_up_to_16(acme):
    memory_search(caller=acme.owner, query="plan", agents=[f"agent-{i}" for i in range(16)])
    _refused("agents", lambda: memory_search(
        caller=acme.owner, query="plan", agents=[f"agent-{i}" for i in range(17)]))
    _refused("agents", lambda: memory_search(caller=acme.owner, query="plan", agents=[""]))


def test_task_up_to_200_characters(acme):
    memory_search(caller=acme.owner, query="plan", task="t" * 200)
    _refused("task", lambda: memory_search(caller=acme.owner, query="plan", task="t" * 201))


def test_task_tags_up_to_8(acme):
    memory_search(caller=acme.owner, query="plan", task_tags=[f"tag{i}" for i in range(8)])
    _refused("task_tags", lambda: memory_search(
        caller=acme.owner, query="plan", task_tags=[f"tag{i}" for i in range(9)]))


def test_dates_must_carry_an_offset_and_be_in_order(acme):
    _refused("as_of", lambda: memory_search(caller=acme.owner, query="plan", as_of=dt.datetime(2026, 1, 1)))
    _refused("created_after", lambda: memory_search(
        caller=acme.owner, query="plan", created_after=dt.datetime(2026, 2, 1, tzinfo=dt.UTC),
        created_before=dt.datetime(2026, 1, 1, tzinfo=dt.UTC)))
    _refused("created_before", lambda: memory_search(caller=acme.owner, query="plan", created_before="yesterday"))


def test_content_is_up_to_32768_characters_counted_as_characters(acme):
    sentence = "The quarterly review covers the roadmap. "
    at_limit = (sentence * (limits.CONTENT_MAX_CHARS // len(sentence) + 1))[: limits.CONTENT_MAX_CHARS]
    assert len(at_limit) == 32768
    assert memory_write(caller=acme.owner, content=at_limit)["results"]
    error = _refused("content", lambda: memory_write(caller=acme.owner, content=at_limit + "x"))
    assert "32768" in error.message
    # Characters, not UTF-8 bytes: 32768 three-byte characters (96 KiB) are within the limit.
    memory_write(caller=acme.owner, content="€" * 32768)
    _refused("content", lambda: memory_write(caller=acme.owner, content="€" * 32769))
    _refused("content", lambda: memory_write(caller=acme.owner, content=" "))


def test_session_id_up_to_128_and_resource_up_to_512(acme):
    memory_write(caller=acme.owner, content="Lunch is at noon.", session_id="s" * 128, resource="r" * 512)
    _refused("session_id", lambda: memory_write(caller=acme.owner, content="Lunch is at noon.", session_id="s" * 129))
    _refused("resource", lambda: memory_write(caller=acme.owner, content="Lunch is at noon.", resource="r" * 513))


def test_idempotency_key_up_to_256(acme):
    memory_write(caller=acme.owner, content="Lunch is at noon.", idempotency_key="k" * 256)
    _refused("idempotency_key", lambda: memory_write(
        caller=acme.owner, content="Lunch is at noon.", idempotency_key="k" * 257))


def test_receipt_id_up_to_256(acme):
    with pytest.raises(NotFound):
        receipt_replay(caller=acme.owner, receipt_id="r" * 256)
    _refused("receipt_id", lambda: receipt_replay(caller=acme.owner, receipt_id="r" * 257))
