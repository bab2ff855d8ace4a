"""Django's PostgreSQL backend with one addition: a statement run inside
`prepared()` is prepared on its connection the first time that connection
runs it, and planned from then on as PostgreSQL chooses for a prepared
statement (a generic plan once it costs no more than planning each run).

For the small statements every call runs again with other values: checking
a token, finding the caller (both compiled once: `lookups`), a search's
prologue and its row check, a write's judgement. Planning each took longer
than running it (the token's, with the six tables it reads its holder from,
1.1 ms of 1.3). Everything else runs as Django runs it: its client-side
binding, nothing prepared (its default, so that a transaction-mode pooler
between the process and PostgreSQL keeps working).

A prepared statement lives on its connection (psycopg keeps the last 100 of
each; the pool keeps the connections; a rollback of the connection's
transaction deallocates them all, and they are prepared again when next
run). Behind a pooler that cannot carry prepared statements from one
transaction to the next (PgBouncer in transaction mode before 1.22, or
without max_prepared_statements), set DATABASE_PREPARED_STATEMENTS=0:
`prepared()` then changes nothing.
"""

from __future__ import annotations

import logging
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import psycopg
from django.conf import settings
from django.db import DEFAULT_DB_ALIAS, connections
from django.db.backends.postgresql import base, operations
from django.db.backends.postgresql.psycopg_any import register_tzloader
from psycopg.pq import Format, TransactionStatus

from memoryhub.database import replicas

logger = logging.getLogger("memoryhub.replicas")

# OPTIONS key (not handed to psycopg): whether `prepared()` prepares.
PREPARED_STATEMENTS = "prepared_statements"
# psycopg prepares nothing while a connection's prepare_threshold is None; any
# number lets PreparedCursor ask (it always does). Django's own cursors bind on
# the client and never prepare.
PREPARE_WHEN_ASKED = 5


# What PostgreSQL answers when a connection's prepared statement is gone or
# stale: dropped behind psycopg's back (a reset, a pooler), planned with a type
# that was dropped and made anew (a restore recreates pgvector's), or reading
# columns that changed.
STALE = (psycopg.errors.InvalidSqlStatementName, psycopg.errors.InternalError_, psycopg.errors.FeatureNotSupported)


class PreparedCursor(psycopg.Cursor[Any]):
    """Binds its parameters on the server (psycopg's own cursor, as Django's
    server-side binding uses) and runs every statement prepared. A statement
    that fails as a stale prepared one would, outside a transaction, is run
    once more after the connection's prepared statements are dropped
    (DEALLOCATE ALL, which psycopg sees and forgets its own by); inside one,
    the failure is raised, and the transaction's rollback drops them."""

    def execute(
        self, query: Any, params: Any = None, *, prepare: bool | None = None, binary: bool | None = None
    ) -> Any:
        try:
            return super().execute(query, params, prepare=True, binary=binary)
        except STALE:
            if self.connection.info.transaction_status != TransactionStatus.IDLE:
                raise
        self.connection.execute("DEALLOCATE ALL")
        return super().execute(query, params, prepare=True, binary=binary)


class DatabaseOperations(operations.DatabaseOperations):
    def last_executed_query(self, cursor: Any, sql: str, params: Any) -> str | None:  # type: ignore[override]
        if isinstance(cursor, PreparedCursor):
            # What Django's own server-side binding logs: the statement with
            # its values (psycopg's is the prepared text, with $1, $2...).
            try:
                return self.compose_sql(sql, params)
            except psycopg.DataError:
                return None
        return super().last_executed_query(cursor, sql, params)  # type: ignore[no-any-return]


class DatabaseWrapper(base.DatabaseWrapper):  # type: ignore[misc]
    ops_class = DatabaseOperations

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.preparing = 0
        # A transaction managed by hand wrote: its position is recorded when it commits (_commit).
        self.written_uncommitted = False
        if self.alias == DEFAULT_DB_ALIAS:
            # First of the wrappers, for good: execute_wrapper() adds and pops after it.
            self.execute_wrappers.append(self._writes_noted)

    def _writes_noted(self, execute: Any, sql: Any, params: Any, many: bool, context: Any) -> Any:
        """With read replicas configured, a committed write's WAL position is
        recorded (memoryhub.database.replicas), so that no later read is
        served by a replica that has not replayed it: after the statement in
        autocommit, after the commit in a transaction."""
        result = execute(sql, params, many, context)
        if settings.MEMORYHUB_READ_REPLICAS and replicas.counts_as_write(sql):
            if self.get_autocommit():
                self._note_written()
            elif self.in_atomic_block and self.commit_on_exit:
                # Django's atomic block: once it commits, first of its commit hooks (so no other hook's
                # failure skips it), as on_commit() keeps one, with the savepoints it was made in.
                hooks: list[Any] = self.run_on_commit  # Django 5.2's: (savepoint ids, callable, robust)
                if not any(entry[1] == self._note_written for entry in hooks):
                    hooks.insert(0, (set(self.savepoint_ids), self._note_written, True))
            else:
                # A transaction managed by hand (atomic blocks inside it included): when it commits (_commit).
                self.written_uncommitted = True
        return result

    def _note_written(self) -> None:
        replicas.note_written(self)

    def _commit(self) -> None:
        super()._commit()  # type: ignore[misc]
        if self.written_uncommitted:
            self.written_uncommitted = False
            self._note_written()
            try:
                super()._commit()  # type: ignore[misc]  # ends the transaction the position's statement began
            except Exception:  # noqa: BLE001 - the write committed above; note_written logged any failure
                logger.warning("could not end the transaction that read the position after a commit",
                               exc_info=True)

    def _rollback(self) -> None:
        self.written_uncommitted = False
        super()._rollback()  # type: ignore[misc]

    @property
    def prepares(self) -> bool:
        return bool(self.settings_dict["OPTIONS"].get(PREPARED_STATEMENTS, True))

    def get_connection_params(self) -> dict[str, Any]:
        params: dict[str, Any] = super().get_connection_params()
        params.pop(PREPARED_STATEMENTS, None)
        return params

    def create_cursor(self, name: str | None = None) -> Any:
        if name is not None or not self.preparing or not self.prepares:
            return super().create_cursor(name)
        cursor = PreparedCursor(self.connection)
        # The timestamps' zone, as Django's create_cursor sets it.
        loader = self.connection.adapters.get_loader(base.TIMESTAMPTZ_OID, Format.TEXT)
        if loader.timezone != self.timezone:
            register_tzloader(self.timezone, cursor)
        return cursor


@contextmanager
def prepared(using: str | None = None) -> Iterator[None]:
    """Statements run inside (by this thread, on `using`) are prepared on
    their connection. Only for statements whose SQL is the same from one run
    to the next, with only their parameters changing: each distinct text is
    prepared once per connection.

    The connection is opened first, so what runs when one is made (Django's
    connection_created handlers) runs as Django runs it. psycopg may prepare
    only inside: outside, its prepare_threshold stays None (Django's default),
    so it keeps no count of the statements Django sends, whose text holds
    their values.

    `using`: by default, the connection of the read under way (a replica's
    inside replicas.on_pool), else the primary's."""
    wrapper = connections[using or replicas.read_alias()]
    if not isinstance(wrapper, DatabaseWrapper) or not wrapper.prepares:
        yield
        return
    wrapper.ensure_connection()
    wrapper.preparing += 1
    if wrapper.preparing == 1:
        wrapper.connection.prepare_threshold = PREPARE_WHEN_ASKED
    try:
        yield
    finally:
        wrapper.preparing -= 1
        if wrapper.preparing == 0 and wrapper.connection is not None:
            wrapper.connection.prepare_threshold = None


__all__ = ["DatabaseWrapper", "PreparedCursor", "prepared"]
