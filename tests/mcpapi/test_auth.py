"""401 and 403 challenges, and what a token opens."""

from __future__ import annotations

import pytest

from mcpapi.auth import resource_url
from mcpapi.connection import FULL_ENDPOINT, READONLY_ENDPOINT
from tests.support.deployments import McpDeployment

from .rpc_http import call_tool, modern_headers, modern_request, post, tool_result


def _metadata(server: McpDeployment, endpoint: str) -> str:
    return f"{server.base_url}/.well-known/oauth-protected-resource{endpoint}"


def test_no_token_gets_a_challenge_without_an_error(deployment: McpDeployment) -> None:
    response = post(
        deployment.url(), modern_request("tools/list"), modern_headers("tools/list")
    )
    assert response.status_code == 401
    assert response.headers["www-authenticate"] == (
        f'Bearer scope="memory.read memory.write memory.audit", resource_metadata="{_metadata(deployment, "/mcp")}"'
    )


def test_the_readonly_challenge_names_its_own_metadata(
    deployment: McpDeployment,
) -> None:
    response = post(
        deployment.url(READONLY_ENDPOINT),
        modern_request("tools/list"),
        modern_headers("tools/list"),
    )
    assert response.status_code == 401
    assert response.headers["www-authenticate"] == (
        f'Bearer scope="memory.read memory.audit", resource_metadata="{_metadata(deployment, "/mcp/readonly")}"'
    )


def test_a_non_bearer_credential_counts_as_none(deployment: McpDeployment) -> None:
    headers = modern_headers("tools/list") | {"Authorization": "Basic dXNlcjpwYXNz"}
    response = post(deployment.url(), modern_request("tools/list"), headers)
    assert response.status_code == 401
    assert "error=" not in response.headers["www-authenticate"]


def _assert_invalid_token(
    response_headers: dict[str, str] | object, server: McpDeployment, endpoint: str
) -> None:
    challenge = response_headers["www-authenticate"]  # type: ignore[index]
    assert challenge.startswith('Bearer error="invalid_token", ')
    assert f'resource_metadata="{_metadata(server, endpoint)}"' in challenge


@pytest.mark.parametrize("token", ["garbage", "fake.!!!", "two parts"])
def test_an_invalid_token_is_refused(deployment: McpDeployment, token: str) -> None:
    headers = modern_headers("tools/list") | {"Authorization": f"Bearer {token}"}
    response = post(deployment.url(), modern_request("tools/list"), headers)
    assert response.status_code == 401
    _assert_invalid_token(response.headers, deployment, "/mcp")


def test_an_expired_token_is_refused(deployment: McpDeployment) -> None:
    token = deployment.token(expires_in=-1)
    response = call_tool(deployment.url(), token, "whoami", {})
    assert response.status_code == 401
    _assert_invalid_token(response.headers, deployment, "/mcp")


def test_a_token_for_mcp_does_not_open_mcp_readonly(deployment: McpDeployment) -> None:
    response = call_tool(
        deployment.url(READONLY_ENDPOINT),
        deployment.token(endpoint=FULL_ENDPOINT),
        "whoami",
        {},
    )
    assert response.status_code == 401
    _assert_invalid_token(response.headers, deployment, "/mcp/readonly")


def test_a_token_for_another_server_is_refused(deployment: McpDeployment) -> None:
    token = deployment.token(resource=resource_url("https://elsewhere.example", FULL_ENDPOINT))
    assert call_tool(deployment.url(), token, "whoami", {}).status_code == 401


def test_a_token_without_a_memory_scope_opens_nothing(
    deployment: McpDeployment,
) -> None:
    token = deployment.token(scopes=("openid", "profile"))
    response = call_tool(deployment.url(), token, "whoami", {})
    assert response.status_code == 401
    _assert_invalid_token(response.headers, deployment, "/mcp")
    # The fake verifier hands the gateway a principal without a memory scope, which the
    # gateway refuses by name; the project's verifier (and token exchange) refuses the token.
    expected = (
        "The token carries no memory scope"
        if deployment.name == "fake"
        else "The token is invalid, expired or not for this resource"
    )
    assert response.json()["error"]["message"] == expected


@pytest.mark.parametrize(
    ("tool", "arguments", "scope"),
    [
        ("memory_write", {"content": "x"}, "memory.write"),
        ("memory_receipt", {"receipt_id": "r"}, "memory.audit"),
    ],
)
def test_a_call_without_its_scope_is_challenged(
    deployment: McpDeployment, tool: str, arguments: dict[str, str], scope: str
) -> None:
    token = deployment.token(scopes=("memory.read",))
    response = call_tool(deployment.url(), token, tool, arguments)
    assert response.status_code == 403
    assert response.headers["www-authenticate"] == (
        f'Bearer error="insufficient_scope", scope="{scope}", '
        f'resource_metadata="{_metadata(deployment, "/mcp")}", error_description="{tool} needs the {scope} scope"'
    )
    assert response.json()["id"] == 1
    assert response.json()["error"]["message"].startswith("insufficient_scope")


def test_search_without_memory_read_is_challenged(deployment: McpDeployment) -> None:
    token = deployment.token(scopes=("memory.write",))
    response = call_tool(deployment.url(), token, "memory_search", {"query": "q"})
    assert response.status_code == 403
    assert 'scope="memory.read"' in response.headers["www-authenticate"]


def test_the_scope_challenge_applies_on_the_handshake_path(
    deployment: McpDeployment,
) -> None:
    headers = {
        "Content-Type": "application/json",
        "Accept": "application/json, text/event-stream",
        "MCP-Protocol-Version": "2025-06-18",
        "Authorization": f"Bearer {deployment.token(scopes=('memory.read',))}",
    }
    body = {
        "jsonrpc": "2.0",
        "id": 5,
        "method": "tools/call",
        "params": {"name": "memory_write", "arguments": {}},
    }
    response = post(deployment.url(), body, headers)
    assert response.status_code == 403
    assert (
        'error="insufficient_scope", scope="memory.write"'
        in response.headers["www-authenticate"]
    )


def test_whoami_needs_no_particular_memory_scope(deployment: McpDeployment) -> None:
    token = deployment.token(scopes=("memory.read",))
    result = tool_result(call_tool(deployment.url(), token, "whoami", {}))
    assert result["structuredContent"]["scopes"] == ["memory.read"]


def test_a_hidden_tool_is_unknown_rather_than_challenged(
    deployment: McpDeployment,
) -> None:
    readonly = deployment.token(endpoint=READONLY_ENDPOINT, scopes=("memory.read",))
    write = call_tool(
        deployment.url(READONLY_ENDPOINT), readonly, "memory_write", {"content": "x"}
    )
    agent = deployment.token(kind="agent", scopes=("memory.read",))
    receipt = call_tool(deployment.url(), agent, "memory_receipt", {"receipt_id": "r"})
    for response, name in ((write, "memory_write"), (receipt, "memory_receipt")):
        assert response.status_code != 403
        assert response.json()["error"]["message"] == f"Unknown tool: {name}"


def test_identity_comes_from_the_token_only(deployment: McpDeployment) -> None:
    # An IdP-style subject in the characters a login name may hold (memoryhub.services.members).
    token = deployment.token(subject="okta.00u1abc@idp", tenant="c40d9736")
    spoof = tool_result(
        call_tool(deployment.url(), token, "whoami", {"subject": "someone-else"})
    )
    assert spoof["isError"] is True
    whoami = tool_result(call_tool(deployment.url(), token, "whoami", {}))[
        "structuredContent"
    ]
    assert (whoami["subject"], whoami["tenant"], whoami["principal_kind"]) == deployment.identity(token)
    assert "okta.00u1abc@idp" in whoami["subject"]
    search = tool_result(
        call_tool(
            deployment.url(), token, "memory_search", {"query": "q", "user_id": "x"}
        )
    )
    assert search["isError"] is True
    assert "user_id" in search["content"][0]["text"]
