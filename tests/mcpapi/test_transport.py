"""Transport rules, over plain HTTP: POST only, Origin, size, one message, revisions, no session."""

from __future__ import annotations

from collections.abc import Iterator

import httpx2
import pytest

from mcpapi.connection import READONLY_ENDPOINT
from tests.support.deployments import McpDeployment

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
    deployment: McpDeployment, method: str, endpoint: str
) -> None:
    response = httpx2.request(
        method,
        deployment.base_url + endpoint,
        headers={
            "Accept": "text/event-stream",
            "Authorization": f"Bearer {deployment.token()}",
        },
        timeout=10,
    )
    assert response.status_code == 405
    assert response.headers["allow"] == "POST"
    assert not response.headers.get("content-type", "").startswith("text/event-stream")


def test_an_absent_origin_passes(deployment: McpDeployment) -> None:
    token = deployment.token()
    assert (
        tool_result(call_tool(deployment.url(), token, "whoami", {}))["isError"]
        is False
    )


def test_an_allowed_origin_passes(deployment: McpDeployment) -> None:
    headers = modern_headers("tools/list", token=deployment.token()) | {
        "Origin": deployment.allowed_origin
    }
    assert (
        post(deployment.url(), modern_request("tools/list"), headers).status_code == 200
    )


@pytest.mark.parametrize(
    "origin", ["https://evil.example", "null", "{allowed}.evil.example", "{allowed}:1"]
)
def test_a_foreign_origin_is_refused(deployment: McpDeployment, origin: str) -> None:
    headers = modern_headers("tools/list", token=deployment.token()) | {
        "Origin": origin.format(allowed=deployment.allowed_origin)
    }
    response = post(deployment.url(), modern_request("tools/list"), headers)
    assert response.status_code == 403
    assert response.json()["error"]["message"] == "Origin not allowed"


def test_a_batch_is_refused(deployment: McpDeployment) -> None:
    batch = [
        modern_request("tools/list", request_id=1),
        modern_request("tools/list", request_id=2),
    ]
    response = post(
        deployment.url(), batch, modern_headers("tools/list", token=deployment.token())
    )
    assert response.status_code == 400
    error = response.json()["error"]
    assert error["code"] == -32600
    assert "Batched JSON-RPC is not supported" in error["message"]


def test_a_batch_is_refused_on_the_handshake_path_too(
    deployment: McpDeployment,
) -> None:
    headers = {
        "Content-Type": "application/json",
        "Accept": "application/json, text/event-stream",
        "MCP-Protocol-Version": "2025-11-25",
        "Authorization": f"Bearer {deployment.token()}",
    }
    batch = [{"jsonrpc": "2.0", "id": 1, "method": "tools/list"}]
    response = post(deployment.url(), batch, headers)
    assert response.status_code == 400
    assert response.json()["error"]["code"] == -32600


def test_a_body_that_is_not_json_is_a_parse_error(deployment: McpDeployment) -> None:
    response = post(
        deployment.url(),
        b"{not json",
        modern_headers("tools/list", token=deployment.token()),
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
    deployment: McpDeployment, version: str
) -> None:
    token = deployment.token()
    response = post(
        deployment.url(), _initialize(version), _handshake_headers(token, None)
    )
    assert response.status_code == 200
    assert response.json()["result"]["protocolVersion"] == version
    assert "mcp-session-id" not in response.headers
    listed = post(
        deployment.url(),
        {"jsonrpc": "2.0", "id": 2, "method": "tools/list"},
        _handshake_headers(token, version),
    )
    assert listed.status_code == 200
    assert "mcp-session-id" not in listed.headers


@pytest.mark.parametrize("version", ["2024-11-05", "2025-03-26"])
def test_a_retired_revision_is_refused_at_initialize(
    deployment: McpDeployment, version: str
) -> None:
    response = post(
        deployment.url(),
        _initialize(version),
        _handshake_headers(deployment.token(), None),
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
    deployment: McpDeployment, version: str
) -> None:
    body = {"jsonrpc": "2.0", "id": 7, "method": "tools/list"}
    response = post(
        deployment.url(), body, _handshake_headers(deployment.token(), version)
    )
    assert response.status_code == 400
    error = response.json()
    assert error["id"] == 7
    assert error["error"]["code"] == -32022
    assert error["error"]["data"]["requested"] == version


def test_a_missing_revision_header_is_refused_after_initialize(
    deployment: McpDeployment,
) -> None:
    body = {"jsonrpc": "2.0", "id": 3, "method": "tools/list"}
    response = post(
        deployment.url(), body, _handshake_headers(deployment.token(), None)
    )
    assert response.status_code == 400
    assert "Missing MCP-Protocol-Version header" in response.json()["error"]["message"]


def test_the_served_revision_needs_no_handshake_and_issues_no_session(
    deployment: McpDeployment,
) -> None:
    response = post(
        deployment.url(),
        modern_request("tools/list"),
        modern_headers("tools/list", token=deployment.token()),
    )
    assert response.status_code == 200
    assert response.headers["content-type"].startswith("application/json")
    assert "mcp-session-id" not in response.headers


def _whoami_body() -> dict[str, object]:
    return modern_request("tools/call", {"name": "whoami", "arguments": {}})


def test_a_body_of_exactly_the_limit_is_served(deployment: McpDeployment) -> None:
    body = padded(_whoami_body(), BODY_LIMIT)
    response = post(
        deployment.url(),
        body,
        modern_headers("tools/call", "whoami", deployment.token()),
    )
    assert len(body) == BODY_LIMIT
    assert tool_result(response)["isError"] is False


def test_a_body_one_byte_over_the_limit_is_refused(deployment: McpDeployment) -> None:
    body = padded(_whoami_body(), BODY_LIMIT + 1)
    response = post(
        deployment.url(),
        body,
        modern_headers("tools/call", "whoami", deployment.token()),
    )
    assert response.status_code == 413


def _chunks(body: bytes, size: int = 16 * 1024) -> Iterator[bytes]:
    for start in range(0, len(body), size):
        yield body[start : start + size]


def test_a_streamed_body_is_counted(deployment: McpDeployment) -> None:
    headers = modern_headers("tools/call", "whoami", deployment.token())
    at_limit = httpx2.post(
        deployment.url(),
        content=_chunks(padded(_whoami_body(), BODY_LIMIT)),
        headers=headers,
    )
    over = httpx2.post(
        deployment.url(),
        content=_chunks(padded(_whoami_body(), BODY_LIMIT + 1)),
        headers=headers,
    )
    assert "content-length" not in at_limit.request.headers
    assert tool_result(at_limit)["isError"] is False
    assert over.status_code == 413


def test_an_oversized_body_is_refused_before_authentication(
    deployment: McpDeployment,
) -> None:
    response = post(
        deployment.url(),
        padded(_whoami_body(), BODY_LIMIT + 1),
        modern_headers("tools/call", "whoami"),
    )
    assert response.status_code == 413


@pytest.mark.parametrize("path", ["/", "/mcp/", "/mcp/other", "/accounts/login/"])
def test_other_paths_go_to_the_fallback(mcp_server: RunningServer, path: str) -> None:
    response = httpx2.post(mcp_server.base_url + path, content=b"{}", timeout=10)
    assert response.status_code == 404
    assert response.json() == {"fallback": path}


def test_the_readonly_endpoint_is_served_too(deployment: McpDeployment) -> None:
    token = deployment.token(endpoint=READONLY_ENDPOINT)
    assert (
        tool_result(call_tool(deployment.url(READONLY_ENDPOINT), token, "whoami", {}))[
            "isError"
        ]
        is False
    )


def test_a_listen_request_gets_no_event_stream(deployment: McpDeployment) -> None:
    body = modern_request("subscriptions/listen", {"notifications": {}})
    response = post(
        deployment.url(),
        body,
        modern_headers("subscriptions/listen", token=deployment.token()),
    )
    assert response.headers["content-type"].startswith("application/json")
    assert "error" in response.json()
