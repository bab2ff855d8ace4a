"""The response limits: 4 KiB per fragment value, 128 KiB per tool result."""

from __future__ import annotations

from typing import Any, Final

import mcp_types as types

from mcpapi.tools import tool_result

FRAGMENT_VALUE_MAX_BYTES: Final = 4 * 1024
RESULT_MAX_BYTES: Final = 128 * 1024


def result_size(result: types.CallToolResult) -> int:
    """Bytes of the whole tool result as it goes on the wire."""
    return len(result.model_dump_json(by_alias=True, exclude_none=True).encode())


def clip_utf8(text: str, max_bytes: int) -> str:
    encoded = text.encode()
    if len(encoded) <= max_bytes:
        return text
    # Cutting bytes can split a character; dropping the partial one keeps valid text.
    return encoded[:max_bytes].decode(errors="ignore")


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
    clipped = clip_utf8(fragment["value"], FRAGMENT_VALUE_MAX_BYTES)
    if clipped == fragment["value"]:
        return fragment
    return {**fragment, "value": clipped, "value_truncated": True}
