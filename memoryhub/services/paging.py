"""Keyset pages with opaque cursors (on the sort key and the primary key), so a
page never shifts when rows are written while someone reads."""

from __future__ import annotations

import base64
import binascii
import datetime as dt
from dataclasses import dataclass
from typing import Any, Generic, TypeVar

from django.core.exceptions import ValidationError
from django.db.models import Q, QuerySet

from memoryhub.errors import InvalidArgument

PAGE_SIZE = 25
PAGE_SIZE_MAX = 100
CURSOR_MAX_CHARS = 200

T = TypeVar("T")

_INVALID = "This page link is not valid; start again from the first page."


@dataclass(frozen=True)
class Page(Generic[T]):
    items: list[T]
    next_cursor: str | None


def cursor_encode(instant: dt.datetime, pk: Any) -> str:
    raw = f"{instant.astimezone(dt.UTC).isoformat()}|{pk}".encode()
    return base64.urlsafe_b64encode(raw).decode().rstrip("=")


def cursor_decode(cursor: str) -> tuple[dt.datetime, str]:
    if len(cursor) > CURSOR_MAX_CHARS:
        raise InvalidArgument(_INVALID, field="cursor")
    try:
        raw = base64.urlsafe_b64decode(cursor + "=" * (-len(cursor) % 4)).decode()
        instant_text, pk = raw.split("|", 1)
        parsed = dt.datetime.fromisoformat(instant_text)
        # In UTC: Python takes offsets PostgreSQL refuses (+23:59, seconds and fractions of them).
        instant = parsed.astimezone(dt.UTC) if parsed.tzinfo is not None else None
    except (binascii.Error, UnicodeDecodeError, ValueError, OverflowError):
        raise InvalidArgument(_INVALID, field="cursor") from None
    if instant is None or not pk or "\x00" in pk:
        raise InvalidArgument(_INVALID, field="cursor")
    return instant, pk


def keyset_page(queryset: QuerySet, *, key: str, cursor: str | None, limit: int | None) -> Page:
    """Newest first by `key`, ties broken by pk; `limit` rows after the cursor."""
    limit = max(1, min(limit or PAGE_SIZE, PAGE_SIZE_MAX))
    if cursor:
        instant, pk = cursor_decode(cursor)
        try:
            queryset = queryset.filter(Q(**{f"{key}__lt": instant}) | Q(**{key: instant, "pk__lt": pk}))
        except (ValidationError, ValueError):
            raise InvalidArgument(_INVALID, field="cursor") from None
    rows = list(queryset.order_by(f"-{key}", "-pk")[: limit + 1])
    following = None
    if len(rows) > limit:
        rows = rows[:limit]
        last = rows[-1]
        following = cursor_encode(getattr(last, key), last.pk)
    return Page(items=rows, next_cursor=following)
