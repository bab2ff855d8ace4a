"""Thin tool handlers: take validated arguments, call the memory client once,
return what it answered. Failures become tool results the model can read."""

from __future__ import annotations

import json
import logging
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from datetime import date, datetime
from typing import Any, TypeVar
from uuid import UUID

import anyio
import mcp_types as types

from mcpapi.client import MemoryClient, MemoryServiceError
from mcpapi.connection import Connection

logger = logging.getLogger(__name__)

T = TypeVar("T")

READ_POOL_STATES = ("ready", "degraded", "unavailable")


class UpstreamTimeout(Exception):
    """The memory service did not answer within the upstream read deadline."""


@dataclass(frozen=True)
class ToolCall:
    caller: Connection
    client: MemoryClient
    arguments: dict[str, Any]
    read_timeout: float
    # What this connection lists, for whoami.
    listed_tools: tuple[str, ...]

    async def upstream(self, operation: Awaitable[T]) -> T:
        try:
            with anyio.fail_after(self.read_timeout):
                return await operation
        except TimeoutError as exc:
            raise UpstreamTimeout from exc


ToolHandler = Callable[[ToolCall], Awaitable[dict[str, Any]]]


async def memory_search(call: ToolCall) -> dict[str, Any]:
    return await call.upstream(call.client.search(call.caller.principal, call.arguments))


async def memory_write(call: ToolCall) -> dict[str, Any]:
    # A dropped write comes back as an ordinary result; nothing to map here.
    return await call.upstream(call.client.write(call.caller.principal, call.arguments))


async def memory_receipt(call: ToolCall) -> dict[str, Any]:
    return await call.upstream(call.client.receipt(call.caller.principal, call.arguments["receipt_id"]))


async def whoami(call: ToolCall) -> dict[str, Any]:
    principal = call.caller.principal
    return {
        "tenant": principal.tenant,
        "subject": principal.subject,
        "principal_kind": principal.kind,
        "scopes": principal.memory_scopes,
        "tools_available": sorted(call.listed_tools),
        "read_pool_ready": await _probe(call),
    }


async def _probe(call: ToolCall) -> str:
    # whoami is always available, so a failing probe is a reading, not an error.
    try:
        state = await call.upstream(call.client.probe(call.caller.principal))
    except (UpstreamTimeout, MemoryServiceError):
        return "unavailable"
    except Exception:  # noqa: BLE001
        logger.exception("read-pool probe failed")
        return "unavailable"
    return state if state in READ_POOL_STATES else "unavailable"


async def run_handler(
    name: str, handler: ToolHandler, call: ToolCall, *, deadline: float
) -> dict[str, Any] | types.CallToolResult:
    """The handler's structured result, or a tool error result."""
    try:
        with anyio.fail_after(deadline):
            return jsonable(await handler(call))
    except MemoryServiceError as exc:
        return tool_error(f"{exc.message} ({exc.code})")
    except UpstreamTimeout:
        return tool_error(
            f"{name} failed: the memory service did not answer within {call.read_timeout:g} s. Retry as a new request."
        )
    except TimeoutError:
        return tool_error(
            f"{name} failed: it did not finish within its {deadline:g} s deadline. Retry as a new request."
        )
    except Exception:  # noqa: BLE001
        logger.exception("tool %s failed", name)
        return tool_error(f"{name} failed unexpectedly. Retry as a new request.")


def tool_error(text: str) -> types.CallToolResult:
    return types.CallToolResult(content=[types.TextContent(text=text)], is_error=True)


def tool_result(structured: dict[str, Any]) -> types.CallToolResult:
    return types.CallToolResult(
        content=[types.TextContent(text=json.dumps(structured, ensure_ascii=False, separators=(",", ":")))],
        structured_content=structured,
    )


def jsonable(value: dict[str, Any]) -> dict[str, Any]:
    """Plain JSON types only, so a client may hand back datetimes or UUIDs; and
    valid Unicode only, because a lone surrogate has no UTF-8 form on the wire."""
    text = json.dumps(value, default=_encode, ensure_ascii=False)
    try:
        text.encode()
    except UnicodeEncodeError:
        # A lone surrogate somewhere, a key's included: each string is repaired.
        repaired: dict[str, Any] = _scalar_strings(json.loads(text))
        return repaired
    # Valid Unicode throughout: nothing to walk (the walk was most of this on a search's result).
    converted: dict[str, Any] = json.loads(text)
    return converted


def scalar_text(text: str) -> str:
    """`text` as Unicode scalar values: each lone surrogate becomes U+FFFD, a
    surrogate pair split over two code points becomes its character."""
    try:
        text.encode()
    except UnicodeEncodeError:
        return text.encode("utf-16-le", "surrogatepass").decode("utf-16-le", "replace")
    return text


def _scalar_strings(value: Any) -> Any:
    if isinstance(value, str):
        return scalar_text(value)
    if isinstance(value, dict):
        return {scalar_text(key): _scalar_strings(item) for key, item in value.items()}
    if isinstance(value, list):
        return [_scalar_strings(item) for item in value]
    return value


def _encode(value: Any) -> Any:
    if isinstance(value, datetime | date):
        return value.isoformat()
    if isinstance(value, UUID):
        return str(value)
    if isinstance(value, set | frozenset | tuple):
        return sorted(value) if isinstance(value, set | frozenset) else list(value)
    raise TypeError(f"{type(value).__name__} is not JSON serialisable")
