"""The response limits: 4 KiB per fragment value, 128 KiB per tool result.

Both are applied once, by the memory service, before it records what it served
(memoryhub.mcp_adapter.render measures with `tool_result_size`): the receipt
must list exactly what the client received, so this layer never cuts a search
result. It checks it, and refuses one that does not fit instead of serving
less than the receipt says.
"""

from __future__ import annotations

import logging
from typing import Any

import mcp_types as types

from contract.limits import RESULT_MAX_BYTES
from mcpapi.tools import scalar_text, tool_error, tool_result

logger = logging.getLogger(__name__)


def result_size(result: types.CallToolResult) -> int:
    """Bytes of the whole tool result as it goes on the wire."""
    return len(result.model_dump_json(by_alias=True, exclude_none=True).encode())


def tool_result_size(structured: dict[str, Any]) -> int:
    """Bytes of the tool result that carries `structured`."""
    return result_size(tool_result(structured))


def clip_utf8(text: str, max_bytes: int) -> str:
    """At most `max_bytes` of UTF-8, cut at a character boundary. Never raises:
    text that is not valid Unicode is repaired first."""
    text = scalar_text(text)
    encoded = text.encode()
    if len(encoded) <= max_bytes:
        return text
    # Cutting bytes can split a character; dropping the partial one keeps valid text.
    return encoded[: max(max_bytes, 0)].decode(errors="ignore")


def checked_search_result(structured: dict[str, Any], *, max_bytes: int = RESULT_MAX_BYTES) -> types.CallToolResult:
    """memory_search's tool result, as the memory service fitted it."""
    result = tool_result(structured)
    size = result_size(result)
    if size > max_bytes:
        logger.error("memory_search returned %d bytes, over the %d-byte result budget", size, max_bytes)
        return tool_error("memory_search failed: the memory service returned a result over the 128 KiB budget.")
    return result
