"""Every argument limit, at its boundary and one past it, through the running server."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import Any

import pytest

from tests.support.deployments import McpDeployment

from .live import RunningServer
from .rpc_http import call_tool, tool_result

SEARCH = "memory_search"
WRITE = "memory_write"

# (tool, arguments at the boundary, arguments one past it, field named in the refusal)
BOUNDARIES: list[tuple[str, dict[str, Any], dict[str, Any], str]] = [
    (SEARCH, {"query": "q" * 2000}, {"query": "q" * 2001}, "query"),
    (SEARCH, {"query": "q"}, {"query": ""}, "query"),
    (SEARCH, {"query": "q", "limit": 1}, {"query": "q", "limit": 0}, "limit"),
    (SEARCH, {"query": "q", "limit": 50}, {"query": "q", "limit": 51}, "limit"),
    (
        SEARCH,
        {"query": "q", "resource_ids": ["d"] * 32},
        {"query": "q", "resource_ids": ["d"] * 33},
        "resource_ids",
    ),
    (
        SEARCH,
        {"query": "q", "agents": ["a"] * 16},
        {"query": "q", "agents": ["a"] * 17},
        "agents",
    ),
    (
        SEARCH,
        {"query": "q", "task": "t" * 200},
        {"query": "q", "task": "t" * 201},
        "task",
    ),
    (
        SEARCH,
        {"query": "q", "task_tags": ["t"] * 8},
        {"query": "q", "task_tags": ["t"] * 9},
        "task_tags",
    ),
    (WRITE, {"content": "c" * 32768}, {"content": "c" * 32769}, "content"),
    (
        WRITE,
        {"content": "c", "session_id": "s" * 128},
        {"content": "c", "session_id": "s" * 129},
        "session_id",
    ),
    (
        WRITE,
        {"content": "c", "resource": "r" * 512},
        {"content": "c", "resource": "r" * 513},
        "resource",
    ),
]


@pytest.mark.parametrize(("tool", "at_limit", "past_limit", "field"), BOUNDARIES)
def test_it_enforces_the_limit_at_its_boundary(
    deployment: McpDeployment,
    tool: str,
    at_limit: dict[str, Any],
    past_limit: dict[str, Any],
    field: str,
) -> None:
    token = deployment.token()
    accepted = tool_result(call_tool(deployment.url(), token, tool, at_limit))
    refused = tool_result(call_tool(deployment.url(), token, tool, past_limit))
    assert accepted["isError"] is False, accepted
    assert refused["isError"] is True
    assert refused["content"][0]["text"].startswith(
        f"Invalid arguments for {tool}: {field}"
    )


def test_content_is_counted_in_characters(deployment: McpDeployment) -> None:
    token = deployment.token()
    accepted = tool_result(
        call_tool(deployment.url(), token, WRITE, {"content": "é" * 32768})
    )
    assert accepted["isError"] is False


def test_limit_defaults_to_ten(mcp_server: RunningServer) -> None:
    token = mcp_server.token(subject="limit-default-reader")
    tool_result(call_tool(mcp_server.url(), token, SEARCH, {"query": "defaults"}))
    (arguments,) = [
        a
        for name, p, a in mcp_server.store.calls
        if p.subject == "limit-default-reader"
    ]
    assert arguments["limit"] == 10


def test_date_times_reach_the_client_parsed(mcp_server: RunningServer) -> None:
    token = mcp_server.token(subject="date-time-reader")
    arguments = {
        "query": "q",
        "as_of": "2026-03-01T09:30:00Z",
        "created_after": "2026-01-01T00:00:00+02:00",
    }
    assert (
        tool_result(call_tool(mcp_server.url(), token, SEARCH, arguments))["isError"]
        is False
    )
    (received,) = [
        a for name, p, a in mcp_server.store.calls if p.subject == "date-time-reader"
    ]
    assert received["as_of"] == datetime(2026, 3, 1, 9, 30, tzinfo=UTC)
    assert received["created_after"].utcoffset() == timedelta(hours=2)


@pytest.mark.parametrize(
    "value", ["yesterday", "2026-03-01", "2026-03-01T09:30:00", 1700000000]
)
def test_a_date_time_needs_an_offset(deployment: McpDeployment, value: object) -> None:
    result = tool_result(
        call_tool(
            deployment.url(), deployment.token(), SEARCH, {"query": "q", "as_of": value}
        )
    )
    assert result["isError"] is True
    assert "as_of" in result["content"][0]["text"]


@pytest.mark.parametrize(
    ("tool", "arguments"),
    [
        (SEARCH, {}),
        (WRITE, {}),
        (WRITE, {"content": ""}),
        ("memory_receipt", {}),
        (SEARCH, {"query": "q", "limit": "ten"}),
        (SEARCH, {"query": "q", "tenant": "other"}),
    ],
)
def test_it_refuses_malformed_arguments_as_a_tool_error(
    deployment: McpDeployment, tool: str, arguments: dict[str, Any]
) -> None:
    result = tool_result(
        call_tool(deployment.url(), deployment.token(), tool, arguments)
    )
    assert result["isError"] is True
    assert result["content"][0]["text"].startswith(f"Invalid arguments for {tool}")


def test_an_integral_float_limit_reaches_the_client_as_an_int(mcp_server: RunningServer) -> None:
    token = mcp_server.token(subject="float-limit-reader")
    tool_result(call_tool(mcp_server.url(), token, SEARCH, {"query": "q", "limit": 5.0}))
    (arguments,) = [a for name, p, a in mcp_server.store.calls if p.subject == "float-limit-reader"]
    assert arguments["limit"] == 5 and isinstance(arguments["limit"], int)
