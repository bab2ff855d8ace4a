"""Transport rules, over plain HTTP: POST only, Origin, size, one message, revisions, no session."""

from __future__ import annotations

from collections.abc import Iterator

import httpx2
import pytest

from mcpapi.caller import READONLY_ENDPOINT

from .live import RunningServer
from .rpc_http import (
    call_tool,
    modern_headers,
    modern_request,
    padded,
    post,
    tool_result,
)

BODY_LIMIT = 256 * 1024


@pytest.mark.parametrize("method", ["GET", "DELETE", "PUT", "PATCH", "OPTIONS", "HEAD"])
@pytest.mark.parametrize("endpoint", ["/mcp", "/mcp/readonly"])
def test_only_post_is_allowed(
    mcp_server: RunningServer, method: str, endpoint: str
) -> None:
    response = httpx2.request(
        method,
        mcp_server.base_url + endpoint,
        headers={
            "Accept": "text/event-stream",
            "Authorization": f"Bearer {mcp_server.token()}",
        },
        timeout=10,
    )
    assert response.status_code == 405
    assert response.headers["allow"] == "POST"
    assert not response.headers.get("content-type", "").startswith("text/event-stream")


def test_an_absent_origin_passes(mcp_server: RunningServer) -> None:
    token = mcp_server.token()
    assert (
        tool_result(call_tool(mcp_server.url(), token, "whoami", {}))["isError"]
        is False
    )


def test_an_allowed_origin_passes(mcp_server: RunningServer) -> None:
    headers = modern_headers("tools/list", token=mcp_server.token()) | {
        "Origin": "https://app.example.com"
    }
    assert (
        post(mcp_server.url(), modern_request("tools/list"), headers).status_code == 200
    )


@pytest.mark.parametrize(
    "origin", ["https://evil.example", "null", "https://app.example.com.evil.example"]
)
def test_a_foreign_origin_is_refused(mcp_server: RunningServer, origin: str) -> None:
    headers = modern_headers("tools/list", token=mcp_server.token()) | {
        "Origin": origin
    }
    response = post(mcp_server.url(), modern_request("tools/list"), headers)
    assert response.status_code == 403
    assert response.json()["error"]["message"] == "Origin not allowed"


def test_a_batch_is_refused(mcp_server: RunningServer) -> None:
    batch = [
        modern_request("tools/list", request_id=1),
        modern_request("tools/list", request_id=2),
    ]
    response = post(
        mcp_server.url(), batch, modern_headers("tools/list", token=mcp_server.token())
    )
    assert response.status_code == 400
    error = response.json()["error"]
    assert error["code"] == -32600
    assert "Batched JSON-RPC is not supported" in error["message"]


def test_a_batch_is_refused_on_the_handshake_path_too(
    mcp_server: RunningServer,
) -> None:
    headers = {
        "Content-Type": "application/json",
        "Accept": "application/json, text/event-stream",
        "MCP-Protocol-Version": "2025-11-25",
        "Authorization": f"Bearer {mcp_server.token()}",
    }
    batch = [{"jsonrpc": "2.0", "id": 1, "method": "tools/list"}]
    response = post(mcp_server.url(), batch, headers)
    assert response.status_code == 400
    assert response.json()["error"]["code"] == -32600


def test_a_body_that_is_not_json_is_a_parse_error(mcp_server: RunningServer) -> None:
    response = post(
        mcp_server.url(),
        b"{not json",
        modern_headers("tools/list", token=mcp_server.token()),
    )
    assert response.status_code == 400
    assert response.json()["error"]["code"] == -32700


def _handshake_headers(token: str, version: str | None) -> dict[str, str]:
    headers = {
        "Content-Type": "application/json",
        "Accept": "application/json, text/event-stream",
        "Authorization": f"Bearer {token}",
    }
    if version is not None:
        headers["MCP-Protocol-Version"] = version
    return headers


def _initialize(version: str) -> dict[str, object]:
    return {
        "jsonrpc": "2.0",
        "id": 1,
        "method": "initialize",
        "params": {
            "protocolVersion": version,
            "capabilities": {},
            "clientInfo": {"name": "t", "version": "0"},
        },
    }


@pytest.mark.parametrize("version", ["2025-06-18", "2025-11-25"])
def test_a_handshake_revision_is_accepted(
    mcp_server: RunningServer, version: str
) -> None:
    token = mcp_server.token()
    response = post(
        mcp_server.url(), _initialize(version), _handshake_headers(token, None)
    )
    assert response.status_code == 200
    assert response.json()["result"]["protocolVersion"] == version
    assert "mcp-session-id" not in response.headers
    listed = post(
        mcp_server.url(),
        {"jsonrpc": "2.0", "id": 2, "method": "tools/list"},
        _handshake_headers(token, version),
    )
    assert listed.status_code == 200
    assert "mcp-session-id" not in listed.headers


@pytest.mark.parametrize("version", ["2024-11-05", "2025-03-26"])
def test_a_retired_revision_is_refused_at_initialize(
    mcp_server: RunningServer, version: str
) -> None:
    response = post(
        mcp_server.url(),
        _initialize(version),
        _handshake_headers(mcp_server.token(), None),
    )
    assert response.status_code == 400
    error = response.json()["error"]
    assert error["code"] == -32602
    assert f"Unsupported protocol version {version}" in error["message"]
    assert error["data"] == {
        "supported": ["2025-06-18", "2025-11-25", "2026-07-28"],
        "requested": version,
    }


@pytest.mark.parametrize("version", ["2024-11-05", "2025-03-26", "1999-01-01"])
def test_a_retired_revision_header_is_refused(
    mcp_server: RunningServer, version: str
) -> None:
    body = {"jsonrpc": "2.0", "id": 7, "method": "tools/list"}
    response = post(
        mcp_server.url(), body, _handshake_headers(mcp_server.token(), version)
    )
    assert response.status_code == 400
    error = response.json()
    assert error["id"] == 7
    assert error["error"]["code"] == -32022
    assert error["error"]["data"]["requested"] == version


def test_a_missing_revision_header_is_refused_after_initialize(
    mcp_server: RunningServer,
) -> None:
    body = {"jsonrpc": "2.0", "id": 3, "method": "tools/list"}
    response = post(
        mcp_server.url(), body, _handshake_headers(mcp_server.token(), None)
    )
    assert response.status_code == 400
    assert "Missing MCP-Protocol-Version header" in response.json()["error"]["message"]


def test_the_served_revision_needs_no_handshake_and_issues_no_session(
    mcp_server: RunningServer,
) -> None:
    response = post(
        mcp_server.url(),
        modern_request("tools/list"),
        modern_headers("tools/list", token=mcp_server.token()),
    )
    assert response.status_code == 200
    assert response.headers["content-type"].startswith("application/json")
    assert "mcp-session-id" not in response.headers


def _whoami_body() -> dict[str, object]:
    return modern_request("tools/call", {"name": "whoami", "arguments": {}})


def test_a_body_of_exactly_the_limit_is_served(mcp_server: RunningServer) -> None:
    body = padded(_whoami_body(), BODY_LIMIT)
    response = post(
        mcp_server.url(),
        body,
        modern_headers("tools/call", "whoami", mcp_server.token()),
    )
    assert len(body) == BODY_LIMIT
    assert tool_result(response)["isError"] is False


def test_a_body_one_byte_over_the_limit_is_refused(mcp_server: RunningServer) -> None:
    body = padded(_whoami_body(), BODY_LIMIT + 1)
    response = post(
        mcp_server.url(),
        body,
        modern_headers("tools/call", "whoami", mcp_server.token()),
    )
    assert response.status_code == 413


def _chunks(body: bytes, size: int = 16 * 1024) -> Iterator[bytes]:
    for start in range(0, len(body), size):
        yield body[start : start + size]


def test_a_streamed_body_is_counted(mcp_server: RunningServer) -> None:
    headers = modern_headers("tools/call", "whoami", mcp_server.token())
    at_limit = httpx2.post(
        mcp_server.url(),
        content=_chunks(padded(_whoami_body(), BODY_LIMIT)),
        headers=headers,
    )
    over = httpx2.post(
        mcp_server.url(),
        content=_chunks(padded(_whoami_body(), BODY_LIMIT + 1)),
        headers=headers,
    )
    assert "content-length" not in at_limit.request.headers
    assert tool_result(at_limit)["isError"] is False
    assert over.status_code == 413


def test_an_oversized_body_is_refused_before_authentication(
    mcp_server: RunningServer,
) -> None:
    response = post(
        mcp_server.url(),
        padded(_whoami_body(), BODY_LIMIT + 1),
        modern_headers("tools/call", "whoami"),
    )
    assert response.status_code == 413


@pytest.mark.parametrize("path", ["/", "/mcp/", "/mcp/other", "/accounts/login/"])
def test_other_paths_go_to_the_fallback(mcp_server: RunningServer, path: str) -> None:
    response = httpx2.post(mcp_server.base_url + path, content=b"{}", timeout=10)
    assert response.status_code == 404
    assert response.json() == {"fallback": path}


def test_the_readonly_endpoint_is_served_too(mcp_server: RunningServer) -> None:
    token = mcp_server.token(endpoint=READONLY_ENDPOINT)
    assert (
        tool_result(call_tool(mcp_server.url(READONLY_ENDPOINT), token, "whoami", {}))[
            "isError"
        ]
        is False
    )


def test_a_listen_request_gets_no_event_stream(mcp_server: RunningServer) -> None:
    body = modern_request("subscriptions/listen", {"notifications": {}})
    response = post(
        mcp_server.url(),
        body,
        modern_headers("subscriptions/listen", token=mcp_server.token()),
    )
    assert response.headers["content-type"].startswith("application/json")
    assert "error" in response.json()
