"""4 KiB per fragment value, 128 KiB per tool result.

Both are applied once, by the memory service, before it writes the receipt
(memoryhub.mcp_adapter.render: `fragment_output` clips, `SEARCH_RESULT_BUDGET`
fits), so the receipt lists exactly what the client received. mcpapi never cuts
a search result: `checked_search_result` serves it as it is, or refuses it
with a tool error when it is over the budget.

Here: the check in mcpapi (alone and over the fake memory service), the clip
and the fit against the real domain, and the whole path with the official
client against the single-process product.
"""

from __future__ import annotations

import asyncio
import dataclasses
import json
import uuid
from typing import Any

import pytest

from contract.limits import FRAGMENT_VALUE_MAX_BYTES, RESULT_MAX_BYTES
from mcpapi.budget import checked_search_result, clip_utf8, result_size, tool_result_size
from memoryhub.mcp_adapter import render
from memoryhub.mcp_adapter.render import SEARCH_RESULT_BUDGET, SearchResultBudget
from memoryhub.models import Receipt
from memoryhub.services.access_rules import access_rule_grant
from memoryhub.services.collections import collection_create
from memoryhub.services.ingest import fragment_ingest
from memoryhub.services.receipts import receipt_replay
from memoryhub.services.search import fragments_search
from memoryhub.services.sources import source_register
from tests.conftest import People
from tests.support.deployments import SUITE_ROLE, RealDeployment, suite_workspace
from tests.support.mcp_client import call, connect

from .fakes import HUGE_QUERY, OVERSIZE_QUERY
from .live import RunningServer
from .rpc_http import call_tool, tool_result

QUERY = "Frankfurt failover drill"
FILLER = "Each step is checked twice by the on-call engineer before the next begins. "
OVER_BUDGET = "memory_search failed: the memory service returned a result over the 128 KiB budget."


def sized(index: int, size: int) -> str:
    """A fragment value of exactly `size` bytes (ASCII) that matches QUERY."""
    text = f"{QUERY} step {index:02d}. " + FILLER * (size // len(FILLER) + 1)
    return text[: size - 1] + "."


# --------------------------------------------------------------------------- mcpapi checks, never cuts


def _fragment(index: int, value: str) -> dict[str, Any]:
    return {
        "id": f"f{index}",
        "value": value,
        "value_truncated": False,
        "confidence": 1.0,
        "grounding_status": "grounded",
        "created_at": "2026-01-01T00:00:00Z",
        "agents": [],
        "resources": [],
        "score": 0.5,
    }


def _search(*values: str) -> dict[str, Any]:
    return {
        "fragments": [_fragment(i, v) for i, v in enumerate(values)],
        "receipt_id": "r",
        "as_of": "2026-01-01T00:00:00Z",
        "abstained": False,
        "abstain_reason": None,
        "truncated": False,
        "notice": None,
    }


def test_clipping_never_splits_a_character() -> None:
    clipped = clip_utf8("a" + "€" * 2000, FRAGMENT_VALUE_MAX_BYTES)
    assert len(clipped.encode()) <= FRAGMENT_VALUE_MAX_BYTES
    assert clipped == "a" + "€" * ((FRAGMENT_VALUE_MAX_BYTES - 1) // 3)


def test_a_result_at_the_budget_is_served_as_it_is_and_one_byte_over_is_refused() -> None:
    structured = _search("a" * 100, "b" * 100, "c" * 100)
    size = tool_result_size(structured)
    at_budget = checked_search_result(structured, max_bytes=size)
    one_over = checked_search_result(structured, max_bytes=size - 1)
    assert not at_budget.is_error
    assert at_budget.structured_content == structured
    assert result_size(at_budget) == size
    # Refused whole, never cut: a shorter answer would not be what the receipt lists.
    assert one_over.is_error is True
    assert one_over.structured_content is None
    assert [block.text for block in one_over.content] == [OVER_BUDGET]  # type: ignore[union-attr]


def test_the_production_budget_is_128_kib() -> None:
    # Each value goes on the wire twice: in the structured content and in the text block.
    structured = _search(*["v" * FRAGMENT_VALUE_MAX_BYTES] * 16)
    assert tool_result_size(structured) > RESULT_MAX_BYTES
    assert checked_search_result(structured).is_error is True
    fitting = _search(*["v" * FRAGMENT_VALUE_MAX_BYTES] * 15)
    assert tool_result_size(fitting) <= RESULT_MAX_BYTES
    assert checked_search_result(fitting).structured_content == fitting


def test_the_text_block_mirrors_the_structured_content() -> None:
    result = checked_search_result(_search("x"))
    assert json.loads(result.content[0].text) == result.structured_content  # type: ignore[union-attr]


def test_an_oversize_result_from_the_memory_service_is_a_tool_error(mcp_server: RunningServer) -> None:
    """A memory service that did not fit its answer: nothing of it is served."""
    response = call_tool(mcp_server.url(), mcp_server.token(), "memory_search", {"query": OVERSIZE_QUERY, "limit": 50})
    result = tool_result(response)
    assert result["isError"] is True
    assert result["content"] == [{"type": "text", "text": OVER_BUDGET}]
    assert "structuredContent" not in result


def test_a_fitted_result_passes_through_uncut(mcp_server: RunningServer) -> None:
    """The fake fits as the memory service does; mcpapi serves exactly what it recorded."""
    response = call_tool(mcp_server.url(), mcp_server.token(), "memory_search", {"query": HUGE_QUERY, "limit": 50})
    result = tool_result(response)
    assert result["isError"] is False
    structured = result["structuredContent"]
    assert structured["truncated"] is True
    assert 0 < len(structured["fragments"]) < 50
    assert len(json.dumps(result, ensure_ascii=False, separators=(",", ":")).encode()) <= RESULT_MAX_BYTES
    served = mcp_server.store.receipts[structured["receipt_id"]]["served"]
    assert [fragment["id"] for fragment in structured["fragments"]] == served


# --------------------------------------------------------------------------- the memory service clips and fits


def _wiki(people: People, *values: str) -> list[str]:
    """Shared fragments from the wiki source, in `runbooks` (bruno's engineering role reads it)."""
    return [str(fragment_ingest(source=people.wiki, value=value)[0].pk) for value in values]


def _search_as_bruno(people: People, *, limit: int = 10, budget: Any = SEARCH_RESULT_BUDGET) -> Any:
    return fragments_search(caller=people.caller(people.bruno), query=QUERY, limit=limit, budget=budget)


def _shown(people: People, value: str) -> dict[str, Any]:
    _wiki(people, value)
    [fragment] = render.search_output(_search_as_bruno(people))["fragments"]
    return fragment


def test_a_value_of_exactly_4_kib_is_kept(people: People) -> None:
    value = sized(0, FRAGMENT_VALUE_MAX_BYTES)
    fragment = _shown(people, value)
    assert fragment["value"] == value
    assert fragment["value_truncated"] is False


def test_a_value_one_byte_over_is_clipped(people: People) -> None:
    value = sized(0, FRAGMENT_VALUE_MAX_BYTES + 1)
    fragment = _shown(people, value)
    assert fragment["value"] == value[:FRAGMENT_VALUE_MAX_BYTES]
    assert fragment["value_truncated"] is True


def test_a_clipped_value_never_splits_a_character(people: People) -> None:
    value = f"{QUERY} prices: " + "€" * 2000
    fragment = _shown(people, value)
    assert fragment["value_truncated"] is True
    assert value.startswith(fragment["value"])
    assert FRAGMENT_VALUE_MAX_BYTES - 3 < len(fragment["value"].encode()) <= FRAGMENT_VALUE_MAX_BYTES


def test_a_result_at_the_budget_keeps_every_fragment(people: People) -> None:
    _wiki(people, *(sized(i, 1000) for i in range(3)))
    whole = _search_as_bruno(people, budget=None)
    assert len(whole.hits) == 3
    size = tool_result_size(render.search_output(whole))
    assert SearchResultBudget(max_bytes=size).fitting(whole) == 3
    assert SearchResultBudget(max_bytes=size - 1).fitting(whole) == 2

    served_whole = _search_as_bruno(people)
    assert served_whole.served_ids == whole.served_ids
    assert render.search_output(served_whole)["truncated"] is False


def test_the_search_drops_trailing_fragments_before_it_writes_its_receipt(people: People) -> None:
    _wiki(people, *(sized(i, 1000) for i in range(3)))
    whole = _search_as_bruno(people, budget=None)
    # Room for two fragments and half of the third.
    budget = SearchResultBudget(max_bytes=tool_result_size(render.search_output(whole)) - 500)
    fitted = _search_as_bruno(people, budget=budget)
    output = render.search_output(fitted)
    assert fitted.served_ids == whole.served_ids[:2]
    assert output["truncated"] is True
    assert [fragment["id"] for fragment in output["fragments"]] == fitted.served_ids
    receipt = Receipt.objects.get(pk=fitted.receipt_id)
    assert receipt.served == fitted.served_ids
    assert receipt.budget == budget.name == "mcp-tool-result"


def test_a_search_of_50_fragments_of_4_kib_fits_128_kib_and_its_receipt_says_so(people: People) -> None:
    _wiki(people, *(sized(i, FRAGMENT_VALUE_MAX_BYTES + 200) for i in range(50)))
    bruno = people.caller(people.bruno)
    whole = _search_as_bruno(people, limit=50, budget=None)
    assert len(whole.hits) == 50
    fitted = _search_as_bruno(people, limit=50)
    output = render.search_output(fitted)
    served = fitted.served_ids
    assert output["truncated"] is True
    assert 0 < len(served) < 50
    assert served == whole.served_ids[: len(served)]
    assert tool_result_size(output) <= RESULT_MAX_BYTES
    # The most that fits: one fragment more would not.
    one_more = dataclasses.replace(whole, receipt_id=fitted.receipt_id, as_of=fitted.as_of)
    assert tool_result_size(render.search_output(one_more, hits=len(served) + 1)) > RESULT_MAX_BYTES
    assert all(
        fragment["value_truncated"] and len(fragment["value"].encode()) == FRAGMENT_VALUE_MAX_BYTES
        for fragment in output["fragments"]
    )
    receipt = Receipt.objects.get(pk=fitted.receipt_id)
    assert receipt.served == served == [fragment["id"] for fragment in output["fragments"]]
    assert receipt.budget == SEARCH_RESULT_BUDGET.name
    # A replay through the same interface applies the same budget: the same fragments.
    replay = receipt_replay(caller=bruno, receipt_id=fitted.receipt_id)
    assert (replay.replayed, replay.served_then, replay.served_now) == (True, served, served)
    assert (replay.missing_now, replay.extra_now) == ([], [])


# --------------------------------------------------------------------------- the whole path, official client


@pytest.mark.django_db(transaction=True)
def test_limit_50_over_50_fragments_of_4_kib_through_the_official_client(
    app_deployment: RealDeployment, revision: str
) -> None:
    """The single-process product, the `mcp` client: the answer is truncated, fits 128 KiB,
    and the receipt lists exactly the fragments in it."""
    token = app_deployment.token()
    _, system = suite_workspace()
    collection_create(caller=system, name="drills", exist_ok=True)
    access_rule_grant(caller=system, role=SUITE_ROLE, collection="drills", exist_ok=True)
    source, _ = source_register(caller=system, name=f"drill-{uuid.uuid4().hex[:8]}", collection="drills")
    for index in range(50):
        fragment_ingest(source=source, value=sized(index, FRAGMENT_VALUE_MAX_BYTES + 200))

    async def session() -> tuple[Any, dict[str, Any]]:
        async with connect(app_deployment.url(), token, revision) as client:
            found = await client.call_tool("memory_search", {"query": QUERY, "limit": 50})
            assert not found.is_error, found.content
            assert found.structured_content is not None
            replay = await call(client, "memory_receipt", {"receipt_id": found.structured_content["receipt_id"]})
        return found, replay

    found, replay = asyncio.run(session())

    answer = found.structured_content
    ids = [fragment["id"] for fragment in answer["fragments"]]
    assert answer["truncated"] is True
    assert 0 < len(ids) < 50
    assert len(set(ids)) == len(ids)
    assert result_size(found) <= RESULT_MAX_BYTES
    assert json.loads(found.content[0].text) == answer
    assert all(
        fragment["value_truncated"] and len(fragment["value"].encode()) == FRAGMENT_VALUE_MAX_BYTES
        for fragment in answer["fragments"]
    )
    receipt = Receipt.objects.get(pk=answer["receipt_id"])
    assert receipt.served == ids
    assert receipt.budget == SEARCH_RESULT_BUDGET.name
    assert (replay["served_then"], replay["served_now"], replay["missing_now"], replay["extra_now"]) == (
        ids, ids, [], []
    )
