"""The response limits: 4 KiB per fragment value, 128 KiB per tool result."""

from __future__ import annotations

from typing import Any

import mcp_types as types

from mcpapi.limits import FRAGMENT_VALUE_MAX_BYTES, RESULT_MAX_BYTES
from mcpapi.tools import scalar_text, tool_result


def result_size(result: types.CallToolResult) -> int:
    """Bytes of the whole tool result as it goes on the wire."""
    return len(result.model_dump_json(by_alias=True, exclude_none=True).encode())


def clip_utf8(text: str, max_bytes: int) -> str:
    """At most `max_bytes` of UTF-8, cut at a character boundary. Never raises:
    text that is not valid Unicode (the memory service is not trusted to
    return only that) is repaired first."""
    text = scalar_text(text)
    encoded = text.encode()
    if len(encoded) <= max_bytes:
        return text
    # Cutting bytes can split a character; dropping the partial one keeps valid text.
    return encoded[: max(max_bytes, 0)].decode(errors="ignore")


def fit_search_result(structured: dict[str, Any], *, max_bytes: int = RESULT_MAX_BYTES) -> types.CallToolResult:
    """Clip fragment values, then drop trailing fragments until the result fits."""
    fragments = [_clip_fragment(fragment) for fragment in structured.get("fragments", [])]
    fitted = {**structured, "fragments": fragments}
    result = tool_result(fitted)
    while fragments and result_size(result) > max_bytes:
        fragments.pop()
        fitted = {**fitted, "fragments": fragments, "truncated": True}
        result = tool_result(fitted)
    return result


def _clip_fragment(fragment: Any) -> Any:
    if not isinstance(fragment, dict) or not isinstance(fragment.get("value"), str):
        return fragment
    value = fragment["value"]
    clipped = clip_utf8(value, FRAGMENT_VALUE_MAX_BYTES)
    if clipped == value:
        return fragment
    if clipped == scalar_text(value):
        # Repaired, not shortened.
        return {**fragment, "value": clipped}
    return {**fragment, "value": clipped, "value_truncated": True}
