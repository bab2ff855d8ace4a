"""What full-text search indexes of a fragment besides its own words.

A fragment's context is where it sits: the day it was created (so "in May
2023" or "8 May" finds it), its document's title, and for a conversation's
turn the turn before it (a reply is often only intelligible with what it
answers). The context is searched with a lower weight than the fragment's own
words (migration 0007's search vector: value A, context B) and is never
served: what a reader receives is the fragment's value, as written.

Only what a reader of the fragment may already know goes in: its own date and
its own document's title (a reader of a document's fragment may read the
document, see access.readable_documents), and a turn of the same document.
"""

from __future__ import annotations

import datetime as dt
from typing import Final

# The turn before a turn is context up to this many characters (a fragment's own bound).
CONTEXT_BEFORE_MAX_CHARS: Final = 1000

_MONTHS: Final = ("January", "February", "March", "April", "May", "June", "July", "August", "September",
                  "October", "November", "December")


def date_words(instant: dt.datetime) -> str:
    """'8 May 2023': the UTC day of `instant` in words, locale-independent
    (migration 0007 writes the same with to_char(..., 'FMDD FMMonth YYYY'))."""
    day = instant.astimezone(dt.UTC)
    return f"{day.day} {_MONTHS[day.month - 1]} {day.year}"


def fragment_context(*, created_at: dt.datetime, title: str = "", before: str = "") -> str:
    """The searchable context of a fragment created at `created_at`, in a
    document titled `title`, after the turn `before`."""
    parts = [date_words(created_at), title.strip(), before.strip()[:CONTEXT_BEFORE_MAX_CHARS]]
    return "\n".join(part for part in parts if part)
