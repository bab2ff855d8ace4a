"""Check, then create, under concurrency.

A service checks that a name is free and refuses a taken one with a Conflict;
two requests that check at the same moment both find it free, and the
database's unique index then decides. `unique_or_conflict` turns the loser's
unique violation into the Conflict the check would have given a moment later,
in a savepoint, so nothing the losing request made before stays behind (an
agent's OAuth client, for one) and the caller's transaction stays usable.

Where no unique index can decide (two names that differ but read the same,
say), `one_at_a_time` makes such requests take turns for the rest of their
transactions.
"""

from __future__ import annotations

import hashlib
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import TypeVar

from django.db import IntegrityError, connection, transaction
from psycopg import errors

from memoryhub.errors import Conflict

T = TypeVar("T")


@contextmanager
def unique_or_conflict(conflict: Conflict) -> Iterator[None]:
    try:
        with transaction.atomic():
            yield
    except IntegrityError as exc:
        if isinstance(exc.__cause__, errors.UniqueViolation):
            raise conflict from None
        raise


def created_once(create: Callable[[], T], *, existing: Callable[[], T | None], taken: Conflict,
                 exist_ok: bool = False) -> T:
    """What `create` makes when `existing` finds nothing; otherwise `taken`, or
    with `exist_ok` the row already there, also when a concurrent request made
    it between the check and the create."""
    found = existing()
    if found is not None:
        if exist_ok:
            return found
        raise taken
    try:
        with unique_or_conflict(taken):
            return create()
    except Conflict:
        found = existing() if exist_ok else None
        if found is None:
            raise
        return found


def lock_key(*parts: object) -> int:
    """A PostgreSQL advisory lock's key for what `parts` name ("ingest",
    a workspace, a document): 64 bits of their digest."""
    digest = hashlib.sha256(":".join(str(part) for part in parts).encode()).digest()
    return int.from_bytes(digest[:8], "big", signed=True)


def one_at_a_time(*parts: object) -> None:
    """Wait for, then hold to the end of the transaction, the lock on what
    `parts` name: requests that take it take turns, and each one's next
    statement sees what the one before committed."""
    if not connection.in_atomic_block:
        raise RuntimeError("An advisory transaction lock taken outside a transaction would end at once.")
    with connection.cursor() as cursor:
        cursor.execute("SELECT pg_advisory_xact_lock(%s)", [lock_key(*parts)])
