"""Reading one JSON-RPC message off a POST body, and the protocol-revision rules.

The gateway decides these before the SDK sees the request: the SDK would
accept a batch on the handshake-era path, and 2024-11-05, 2025-03-26 or a
missing version header everywhere.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, Final, TypeGuard

import mcp_types as types

from mcpapi.validation import text_problems

JSONRPC_VERSION: Final = "2.0"
SERVED_REVISION: Final = "2026-07-28"
HANDSHAKE_REVISIONS: Final = ("2025-06-18", "2025-11-25")
ACCEPTED_REVISIONS: Final = (*HANDSHAKE_REVISIONS, SERVED_REVISION)
RETIRED_REVISIONS: Final = ("2024-11-05", "2025-03-26")

RequestId = str | int


@dataclass(frozen=True)
class Message:
    id: RequestId | None
    method: str | None
    params: Mapping[str, Any] = field(default_factory=dict)

    @property
    def tool_name(self) -> str | None:
        name = self.params.get("name")
        return name if self.method == "tools/call" and isinstance(name, str) else None


@dataclass(frozen=True)
class Refusal:
    """A request answered by the gateway with a JSON-RPC error."""

    status: int
    code: int
    message: str
    data: Any = None
    id: RequestId | None = None
    headers: Mapping[str, str] = field(default_factory=dict)

    def body(self) -> bytes:
        error: dict[str, Any] = {"code": self.code, "message": self.message}
        if self.data is not None:
            error["data"] = self.data
        return json.dumps({"jsonrpc": "2.0", "id": self.id, "error": error}).encode()


def read_message(body: bytes) -> Message | Refusal:
    try:
        decoded = json.loads(body)
    except (ValueError, RecursionError):
        return Refusal(400, types.PARSE_ERROR, "Parse error: the body is not JSON")
    if isinstance(decoded, list):
        return Refusal(400, types.INVALID_REQUEST, "Batched JSON-RPC is not supported: send one message per POST")
    if not isinstance(decoded, dict):
        return Refusal(400, types.INVALID_REQUEST, "The body must be one JSON-RPC message object")
    raw_id = decoded.get("id")
    request_id = raw_id if _is_request_id(raw_id) else None
    problem = envelope_problem(decoded)
    if problem is not None:
        # The SDK would drop some of these silently (an empty 202 for a request
        # owed an answer) and answer others with a pydantic dump.
        return Refusal(400, types.INVALID_REQUEST, f"Invalid Request: {problem}", id=request_id)
    method = decoded.get("method")
    params = decoded.get("params")
    return Message(
        id=request_id,
        method=method if isinstance(method, str) else None,
        params=params if isinstance(params, dict) else {},
    )


def envelope_problem(message: Mapping[str, Any]) -> str | None:
    """Why `message` is not a JSON-RPC 2.0 request, notification or response
    as MCP defines them, or None when it is one."""
    if message.get("jsonrpc") != JSONRPC_VERSION:
        return 'jsonrpc must be "2.0"'
    if "method" in message:
        if not isinstance(message["method"], str):
            return "method must be a string"
        if "id" in message and not _is_request_id(message["id"]):
            # MCP: a request id is a string or an integer, never null.
            return "id must be a string (of text: no NUL, no lone surrogate) or an integer"
        if "params" in message and not isinstance(message["params"], dict):
            return "params must be an object"
        return None
    if "result" in message or "error" in message:
        return _response_problem(message)
    return "method is missing"


def _response_problem(message: Mapping[str, Any]) -> str | None:
    if "result" in message and "error" in message:
        return "a response carries result or error, not both"
    if "result" in message:
        if not _is_request_id(message.get("id")):
            return "id must be a string (of text: no NUL, no lone surrogate) or an integer"
        if not isinstance(message["result"], dict):
            return "result must be an object"
        return None
    # An error answering an unreadable request may carry a null id.
    if message.get("id") is not None and not _is_request_id(message.get("id")):
        return "id must be a string (of text: no NUL, no lone surrogate), an integer or null"
    error = message["error"]
    if not isinstance(error, dict) or not _is_integer(error.get("code")) or not isinstance(error.get("message"), str):
        return "error must be an object with an integer code and a string message"
    return None


def _is_integer(value: object) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def _is_request_id(value: object) -> TypeGuard[RequestId]:
    # A string id is echoed in the answer: one holding a lone surrogate (no
    # UTF-8 form) or a NUL would make the answer itself unreadable to a strict client.
    return (isinstance(value, str) and not text_problems(value)) or _is_integer(value)


def revision_refusal(header: str | None, message: Message) -> Refusal | None:
    """Why this request's protocol revision is refused, or None when it is served.

    Handshake-era clients send no version header on `initialize` (the version
    is in its params) and must send it on everything after.
    """
    supported = list(ACCEPTED_REVISIONS)
    if message.method == "initialize":
        requested = message.params.get("protocolVersion")
        if requested in RETIRED_REVISIONS:
            return Refusal(
                400,
                types.INVALID_PARAMS,
                f"Unsupported protocol version {requested}: this server speaks {SERVED_REVISION} "
                f"and accepts {', '.join(HANDSHAKE_REVISIONS)}",
                data={"supported": supported, "requested": requested},
                id=message.id,
            )
        if header is None:
            return None
    if header is None:
        return Refusal(
            400,
            types.INVALID_REQUEST,
            f"Missing MCP-Protocol-Version header: send {SERVED_REVISION} "
            f"(or {' / '.join(HANDSHAKE_REVISIONS)} after an initialize handshake)",
            data={"supported": supported},
            id=message.id,
        )
    if header in ACCEPTED_REVISIONS:
        return None
    return Refusal(
        400,
        types.UNSUPPORTED_PROTOCOL_VERSION,
        f"Unsupported protocol version {header}: this server speaks {SERVED_REVISION} "
        f"and accepts {', '.join(HANDSHAKE_REVISIONS)}",
        data={"supported": supported, "requested": header},
        id=message.id,
    )
