"""401 and 403 challenges, and what a token opens."""

from __future__ import annotations

import pytest

from mcpapi.auth import resource_url
from mcpapi.caller import FULL_ENDPOINT, READONLY_ENDPOINT

from .fakes import mint_token
from .live import RunningServer
from .rpc_http import call_tool, modern_headers, modern_request, post, tool_result


def _metadata(server: RunningServer, endpoint: str) -> str:
    return f"{server.base_url}/.well-known/oauth-protected-resource{endpoint}"


def test_no_token_gets_a_challenge_without_an_error(mcp_server: RunningServer) -> None:
    response = post(
        mcp_server.url(), modern_request("tools/list"), modern_headers("tools/list")
    )
    assert response.status_code == 401
    assert response.headers["www-authenticate"] == (
        f'Bearer scope="memory.read memory.write memory.audit", resource_metadata="{_metadata(mcp_server, "/mcp")}"'
    )


def test_the_readonly_challenge_names_its_own_metadata(
    mcp_server: RunningServer,
) -> None:
    response = post(
        mcp_server.url(READONLY_ENDPOINT),
        modern_request("tools/list"),
        modern_headers("tools/list"),
    )
    assert response.status_code == 401
    assert response.headers["www-authenticate"] == (
        f'Bearer scope="memory.read memory.audit", resource_metadata="{_metadata(mcp_server, "/mcp/readonly")}"'
    )


def test_a_non_bearer_credential_counts_as_none(mcp_server: RunningServer) -> None:
    headers = modern_headers("tools/list") | {"Authorization": "Basic dXNlcjpwYXNz"}
    response = post(mcp_server.url(), modern_request("tools/list"), headers)
    assert response.status_code == 401
    assert "error=" not in response.headers["www-authenticate"]


def _assert_invalid_token(
    response_headers: dict[str, str] | object, server: RunningServer, endpoint: str
) -> None:
    challenge = response_headers["www-authenticate"]  # type: ignore[index]
    assert challenge.startswith('Bearer error="invalid_token", ')
    assert f'resource_metadata="{_metadata(server, endpoint)}"' in challenge


@pytest.mark.parametrize("token", ["garbage", "fake.!!!", "two parts"])
def test_an_invalid_token_is_refused(mcp_server: RunningServer, token: str) -> None:
    headers = modern_headers("tools/list") | {"Authorization": f"Bearer {token}"}
    response = post(mcp_server.url(), modern_request("tools/list"), headers)
    assert response.status_code == 401
    _assert_invalid_token(response.headers, mcp_server, "/mcp")


def test_an_expired_token_is_refused(mcp_server: RunningServer) -> None:
    token = mcp_server.token(expires_in=-1)
    response = call_tool(mcp_server.url(), token, "whoami", {})
    assert response.status_code == 401
    _assert_invalid_token(response.headers, mcp_server, "/mcp")


def test_a_token_for_mcp_does_not_open_mcp_readonly(mcp_server: RunningServer) -> None:
    response = call_tool(
        mcp_server.url(READONLY_ENDPOINT),
        mcp_server.token(endpoint=FULL_ENDPOINT),
        "whoami",
        {},
    )
    assert response.status_code == 401
    _assert_invalid_token(response.headers, mcp_server, "/mcp/readonly")


def test_a_token_for_another_server_is_refused(mcp_server: RunningServer) -> None:
    token = mint_token(
        resource=resource_url("https://elsewhere.example", FULL_ENDPOINT)
    )
    assert call_tool(mcp_server.url(), token, "whoami", {}).status_code == 401


def test_a_token_without_a_memory_scope_opens_nothing(
    mcp_server: RunningServer,
) -> None:
    token = mcp_server.token(scopes=("openid", "profile"))
    response = call_tool(mcp_server.url(), token, "whoami", {})
    assert response.status_code == 401
    _assert_invalid_token(response.headers, mcp_server, "/mcp")
    assert "no memory scope" in response.json()["error"]["message"]


@pytest.mark.parametrize(
    ("tool", "arguments", "scope"),
    [
        ("memory_write", {"content": "x"}, "memory.write"),
        ("memory_receipt", {"receipt_id": "r"}, "memory.audit"),
    ],
)
def test_a_call_without_its_scope_is_challenged(
    mcp_server: RunningServer, tool: str, arguments: dict[str, str], scope: str
) -> None:
    token = mcp_server.token(scopes=("memory.read",))
    response = call_tool(mcp_server.url(), token, tool, arguments)
    assert response.status_code == 403
    assert response.headers["www-authenticate"] == (
        f'Bearer error="insufficient_scope", scope="{scope}", '
        f'resource_metadata="{_metadata(mcp_server, "/mcp")}", error_description="{tool} needs the {scope} scope"'
    )
    assert response.json()["id"] == 1
    assert response.json()["error"]["message"].startswith("insufficient_scope")


def test_search_without_memory_read_is_challenged(mcp_server: RunningServer) -> None:
    token = mcp_server.token(scopes=("memory.write",))
    response = call_tool(mcp_server.url(), token, "memory_search", {"query": "q"})
    assert response.status_code == 403
    assert 'scope="memory.read"' in response.headers["www-authenticate"]


def test_the_scope_challenge_applies_on_the_handshake_path(
    mcp_server: RunningServer,
) -> None:
    headers = {
        "Content-Type": "application/json",
        "Accept": "application/json, text/event-stream",
        "MCP-Protocol-Version": "2025-06-18",
        "Authorization": f"Bearer {mcp_server.token(scopes=('memory.read',))}",
    }
    body = {
        "jsonrpc": "2.0",
        "id": 5,
        "method": "tools/call",
        "params": {"name": "memory_write", "arguments": {}},
    }
    response = post(mcp_server.url(), body, headers)
    assert response.status_code == 403
    assert (
        'error="insufficient_scope", scope="memory.write"'
        in response.headers["www-authenticate"]
    )


def test_whoami_needs_no_particular_memory_scope(mcp_server: RunningServer) -> None:
    token = mcp_server.token(scopes=("memory.read",))
    result = tool_result(call_tool(mcp_server.url(), token, "whoami", {}))
    assert result["structuredContent"]["scopes"] == ["memory.read"]


def test_a_hidden_tool_is_unknown_rather_than_challenged(
    mcp_server: RunningServer,
) -> None:
    readonly = mcp_server.token(endpoint=READONLY_ENDPOINT, scopes=("memory.read",))
    write = call_tool(
        mcp_server.url(READONLY_ENDPOINT), readonly, "memory_write", {"content": "x"}
    )
    agent = mcp_server.token(kind="agent", scopes=("memory.read",))
    receipt = call_tool(mcp_server.url(), agent, "memory_receipt", {"receipt_id": "r"})
    for response, name in ((write, "memory_write"), (receipt, "memory_receipt")):
        assert response.status_code != 403
        assert response.json()["error"]["message"] == f"Unknown tool: {name}"


def test_identity_comes_from_the_token_only(mcp_server: RunningServer) -> None:
    token = mcp_server.token(subject="okta|00u1abc", tenant="c40d9736")
    spoof = tool_result(
        call_tool(mcp_server.url(), token, "whoami", {"subject": "someone-else"})
    )
    assert spoof["isError"] is True
    whoami = tool_result(call_tool(mcp_server.url(), token, "whoami", {}))[
        "structuredContent"
    ]
    assert (whoami["subject"], whoami["tenant"], whoami["principal_kind"]) == (
        "okta|00u1abc",
        "c40d9736",
        "user",
    )
    search = tool_result(
        call_tool(
            mcp_server.url(), token, "memory_search", {"query": "q", "user_id": "x"}
        )
    )
    assert search["isError"] is True
    assert "user_id" in search["content"][0]["text"]
