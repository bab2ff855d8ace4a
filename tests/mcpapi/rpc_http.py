"""Hand-built JSON-RPC over plain HTTP, for the rules a real client never breaks."""

from __future__ import annotations

import json
from typing import Any

import httpx2

MODERN = "2026-07-28"
_META = {
    "io.modelcontextprotocol/protocolVersion": MODERN,
    "io.modelcontextprotocol/clientCapabilities": {},
    "io.modelcontextprotocol/clientInfo": {"name": "raw-test", "version": "0"},
}


def modern_request(
    method: str, params: dict[str, Any] | None = None, *, request_id: int = 1
) -> dict[str, Any]:
    return {
        "jsonrpc": "2.0",
        "id": request_id,
        "method": method,
        "params": {**(params or {}), "_meta": _META},
    }


def modern_headers(
    method: str, name: str | None = None, token: str | None = None
) -> dict[str, str]:
    headers = {
        "Content-Type": "application/json",
        "Accept": "application/json, text/event-stream",
        "MCP-Protocol-Version": MODERN,
        "Mcp-Method": method,
    }
    if name is not None:
        headers["Mcp-Name"] = name
    if token is not None:
        headers["Authorization"] = f"Bearer {token}"
    return headers


def post(url: str, body: Any, headers: dict[str, str]) -> httpx2.Response:
    content = body if isinstance(body, bytes) else json.dumps(body).encode()
    return httpx2.post(url, content=content, headers=headers, timeout=30)


def call_tool(
    url: str, token: str, name: str, arguments: dict[str, Any]
) -> httpx2.Response:
    body = modern_request("tools/call", {"name": name, "arguments": arguments})
    return post(url, body, modern_headers("tools/call", name, token))


def tool_result(response: httpx2.Response) -> dict[str, Any]:
    assert response.status_code == 200, response.text
    payload = response.json()
    assert "result" in payload, payload
    result: dict[str, Any] = payload["result"]
    return result


def list_tool_names(url: str, token: str) -> list[str]:
    response = post(
        url, modern_request("tools/list"), modern_headers("tools/list", token=token)
    )
    return [tool["name"] for tool in tool_result(response)["tools"]]


def padded(body: dict[str, Any], size: int) -> bytes:
    """`body` as JSON, padded with insignificant whitespace to exactly `size` bytes."""
    encoded = json.dumps(body).encode()
    assert len(encoded) <= size
    return encoded + b" " * (size - len(encoded))
