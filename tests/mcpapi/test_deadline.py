"""A slow memory service fails the call with a clear tool error instead of hanging."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import anyio
import pytest

from mcpapi.client import MEMORY_SCOPES, Principal
from mcpapi.connection import FULL_ENDPOINT, Connection
from mcpapi.server import CallLimits
from mcpapi.tools import ToolCall, run_handler

from .fakes import SLOW_QUERY, FakeMemoryClient, MemoryStore
from .live import RunningServer, serving
from .rpc_http import call_tool, tool_result


@pytest.fixture(scope="module")
def short_deadline_server() -> Iterator[RunningServer]:
    with serving(call_deadline=1.0, upstream_read_timeout=0.3) as running:
        yield running


def test_a_slow_upstream_read_is_cut_off(short_deadline_server: RunningServer) -> None:
    response = call_tool(
        short_deadline_server.url(),
        short_deadline_server.token(),
        "memory_search",
        {"query": SLOW_QUERY},
    )
    result = tool_result(response)
    assert result["isError"] is True
    assert result["content"][0]["text"] == (
        "memory_search failed: the memory service did not answer within 0.3 s. Retry as a new request."
    )


def test_the_read_timeout_is_handed_to_the_client(
    short_deadline_server: RunningServer,
) -> None:
    tool_result(
        call_tool(
            short_deadline_server.url(), short_deadline_server.token(), "whoami", {}
        )
    )
    assert short_deadline_server.store.read_timeouts[-1] == 0.3


def test_production_deadlines_are_25_and_20_seconds(mcp_server: RunningServer) -> None:
    assert (
        mcp_server.settings.call_deadline,
        mcp_server.settings.upstream_read_timeout,
    ) == (25.0, 20.0)
    assert CallLimits() == CallLimits(call_deadline=25.0, upstream_read_timeout=20.0)


def test_the_read_timeout_cannot_exceed_the_deadline() -> None:
    with pytest.raises(ValueError, match="upstream_read_timeout"):
        CallLimits(call_deadline=1, upstream_read_timeout=2)


def _call() -> ToolCall:
    principal = Principal(
        tenant="t",
        subject="s",
        kind="user",
        scopes=frozenset(MEMORY_SCOPES),
        client_id="c",
        resource="r",
    )
    return ToolCall(
        caller=Connection(principal=principal, endpoint=FULL_ENDPOINT),
        client=FakeMemoryClient(MemoryStore()),
        arguments={},
        read_timeout=10,
        listed_tools=(),
    )


def test_the_total_deadline_bounds_the_whole_call() -> None:
    async def dawdle(call: ToolCall) -> dict[str, Any]:
        await anyio.sleep(30)
        return {}

    result = anyio.run(
        lambda: run_handler("memory_search", dawdle, _call(), deadline=0.2)
    )
    assert not isinstance(result, dict)
    assert result.is_error
    assert result.content[0].text == (  # type: ignore[union-attr]
        "memory_search failed: it did not finish within its 0.2 s deadline. Retry as a new request."
    )
