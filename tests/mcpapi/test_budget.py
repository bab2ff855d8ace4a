"""4 KiB per fragment value, 128 KiB per tool result."""

from __future__ import annotations

import json
from typing import Any

from mcpapi.budget import (
    FRAGMENT_VALUE_MAX_BYTES,
    RESULT_MAX_BYTES,
    clip_utf8,
    fit_search_result,
    result_size,
)

from .fakes import HUGE_QUERY
from .live import RunningServer
from .rpc_http import call_tool, tool_result


def _fragment(index: int, value: str) -> dict[str, Any]:
    return {
        "id": f"f{index}",
        "value": value,
        "confidence": 1.0,
        "grounding_status": "grounded",
        "created_at": "2026-01-01T00:00:00Z",
        "agents": [],
        "resources": [],
    }


def _search(*values: str) -> dict[str, Any]:
    return {
        "fragments": [_fragment(i, v) for i, v in enumerate(values)],
        "receipt_id": "r",
        "as_of": "2026-01-01T00:00:00Z",
        "abstained": False,
        "truncated": False,
    }


def test_a_value_of_exactly_4_kib_is_kept() -> None:
    result = fit_search_result(_search("v" * FRAGMENT_VALUE_MAX_BYTES))
    fragment = result.structured_content["fragments"][0]
    assert fragment["value"] == "v" * FRAGMENT_VALUE_MAX_BYTES
    assert "value_truncated" not in fragment


def test_a_value_one_byte_over_is_clipped() -> None:
    result = fit_search_result(_search("v" * (FRAGMENT_VALUE_MAX_BYTES + 1)))
    fragment = result.structured_content["fragments"][0]
    assert fragment["value"] == "v" * FRAGMENT_VALUE_MAX_BYTES
    assert fragment["value_truncated"] is True


def test_clipping_never_splits_a_character() -> None:
    clipped = clip_utf8("a" + "€" * 2000, FRAGMENT_VALUE_MAX_BYTES)
    assert len(clipped.encode()) <= FRAGMENT_VALUE_MAX_BYTES
    assert clipped == "a" + "€" * ((FRAGMENT_VALUE_MAX_BYTES - 1) // 3)


def test_a_result_at_the_budget_keeps_every_fragment() -> None:
    structured = _search("a" * 100, "b" * 100, "c" * 100)
    size = result_size(fit_search_result(structured))
    at_budget = fit_search_result(structured, max_bytes=size)
    one_under = fit_search_result(structured, max_bytes=size - 1)
    assert len(at_budget.structured_content["fragments"]) == 3
    assert at_budget.structured_content["truncated"] is False
    assert [f["id"] for f in one_under.structured_content["fragments"]] == ["f0", "f1"]
    assert one_under.structured_content["truncated"] is True


def test_the_text_block_mirrors_the_structured_content() -> None:
    result = fit_search_result(_search("x"))
    assert json.loads(result.content[0].text) == result.structured_content  # type: ignore[union-attr]


def test_a_large_search_comes_back_inside_128_kib(mcp_server: RunningServer) -> None:
    response = call_tool(
        mcp_server.url(),
        mcp_server.token(),
        "memory_search",
        {"query": HUGE_QUERY, "limit": 50},
    )
    result = tool_result(response)
    assert len(json.dumps(result).encode()) <= RESULT_MAX_BYTES
    fragments = result["structuredContent"]["fragments"]
    assert result["structuredContent"]["truncated"] is True
    assert 0 < len(fragments) < 50
    assert all(
        f["value_truncated"] and len(f["value"].encode()) == FRAGMENT_VALUE_MAX_BYTES
        for f in fragments
    )
