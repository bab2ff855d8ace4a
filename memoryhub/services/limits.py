"""Every request limit of contracts 000/001, checked at the service boundary.

The MCP layer validates the same bounds (`mcpapi.limits`, imported here) against
its schemas, but the services are also reached from the web console, the API and
tasks: the domain refuses an out-of-range argument itself, with an
`InvalidArgument` naming the field.

Lengths are counted in characters (Python `len`, Unicode code points), the
unit JSON Schema's maxLength uses; so the 32 KiB content limit is 32768
characters, the same number the MCP schema advertises.
"""

from __future__ import annotations

import datetime as dt
from collections.abc import Sequence
from typing import Any

# The contract's numbers, defined once for the MCP layer and the domain.
from mcpapi.limits import (  # noqa: F401 - re-exported: limits.QUERY_MAX_CHARS and the rest
    AGENT_NAME_MAX_CHARS,
    AGENTS_MAX_ITEMS,
    CONTENT_MAX_CHARS,
    FRAGMENT_VALUE_MAX_BYTES,
    IDEMPOTENCY_KEY_MAX_CHARS,
    LIMIT_DEFAULT,
    LIMIT_MAX,
    LIMIT_MIN,
    QUERY_MAX_CHARS,
    RECEIPT_ID_MAX_CHARS,
    RESOURCE_IDS_MAX_ITEMS,
    RESOURCE_MAX_CHARS,
    RESULT_MAX_BYTES,
    SESSION_ID_MAX_CHARS,
    TASK_MAX_CHARS,
    TASK_TAG_MAX_CHARS,
    TASK_TAGS_MAX_ITEMS,
)
from memoryhub.errors import InvalidArgument


def text(value: Any, *, field: str, max_chars: int, required: bool = False) -> str:
    if value is None:
        value = ""
    if not isinstance(value, str):
        raise InvalidArgument(f"{field} must be a string.", field=field)
    if required and not value.strip():
        raise InvalidArgument(f"{field} must contain some text.", field=field)
    if len(value) > max_chars:
        raise InvalidArgument(
            f"{field} is {len(value)} characters long; the limit is {max_chars}.", field=field
        )
    return value


def integer(value: Any, *, field: str, minimum: int, maximum: int, default: int) -> int:
    if value is None:
        return default
    # bool is an int in Python; `limit=True` is a mistake, not 1.
    if isinstance(value, bool) or not isinstance(value, int):
        raise InvalidArgument(f"{field} must be an integer.", field=field)
    if not minimum <= value <= maximum:
        raise InvalidArgument(f"{field} must be between {minimum} and {maximum}; got {value}.", field=field)
    return value


def strings(value: Any, *, field: str, max_items: int, item_max_chars: int) -> tuple[str, ...]:
    if value is None:
        return ()
    if isinstance(value, str) or not isinstance(value, Sequence):
        raise InvalidArgument(f"{field} must be a list of strings.", field=field)
    if len(value) > max_items:
        raise InvalidArgument(f"{field} has {len(value)} items; the limit is {max_items}.", field=field)
    items = []
    for item in value:
        if not isinstance(item, str) or not item:
            raise InvalidArgument(f"Every item of {field} must be a non-empty string.", field=field)
        if len(item) > item_max_chars:
            raise InvalidArgument(
                f"An item of {field} is longer than {item_max_chars} characters.", field=field
            )
        items.append(item)
    # Order and repetition carry no meaning; a canonical form keeps receipts comparable.
    return tuple(sorted(set(items)))


def instant(value: Any, *, field: str) -> dt.datetime | None:
    if value is None:
        return None
    if isinstance(value, str):
        try:
            value = dt.datetime.fromisoformat(value.replace("Z", "+00:00").replace("z", "+00:00"))
        except ValueError:
            raise InvalidArgument(f"{field} must be an RFC 3339 date-time.", field=field) from None
    if not isinstance(value, dt.datetime):
        raise InvalidArgument(f"{field} must be a date-time.", field=field)
    if value.tzinfo is None or value.utcoffset() is None:
        raise InvalidArgument(f"{field} must carry a UTC offset.", field=field)
    return value.astimezone(dt.UTC)
