"""Reading one JSON-RPC message off a POST body, and the protocol-revision rules.

The gateway decides these before the SDK sees the request: the SDK would
accept a batch on the handshake-era path, and 2024-11-05, 2025-03-26 or a
missing version header everywhere.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, Final

import mcp_types as types

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
    request_id = raw_id if isinstance(raw_id, str | int) and not isinstance(raw_id, bool) else None
    method = decoded.get("method")
    params = decoded.get("params")
    return Message(
        id=request_id,
        method=method if isinstance(method, str) else None,
        params=params if isinstance(params, dict) else {},
    )


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
