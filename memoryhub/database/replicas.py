"""The read pool: PostgreSQL streaming replicas (DATABASE_READ_URLS) that
searches, receipt replays' re-execution and people's read pages read from.
Everything else (writes, receipts, proposals, token checks, finding the
caller) stays on the primary, and with no replica configured every read
does too, with nothing here on its path.

What a read may be served from is decided in one place, `choose`:

- a caller's own transaction on the primary reads on the primary (it may
  hold writes nobody else sees yet);
- a replica serves only if it is still replaying the primary's WAL
  (`pg_is_in_recovery()`: a replica promoted away is a primary of its own,
  diverging) and has replayed at least to the position of the last write
  the primary committed that a read could see (`note_written`, kept in
  Redis, so every process and worker shares it). That is read-your-writes
  and more: a search started after any committed write (one's own, another
  person's, an admin's change of access rules) sees it, whichever replica
  serves it, so a revoked right is never read from a replica behind it;
- otherwise the primary serves the read. A replica behind only by writes
  committed within MEMORYHUB_READ_REPLICA_MAX_LAG_SECONDS is normal
  (replication takes milliseconds); behind by an older write, not
  answering, or promoted, it is a reason to report the pool `degraded`.

A replica's state (in recovery, its replay position) is read from it at
most every MEMORYHUB_READ_REPLICA_CHECK_SECONDS per process, and again
whenever the position a read needs is beyond what was last read; a replica
that does not answer is asked again after MEMORYHUB_READ_REPLICA_RETRY_SECONDS.
A read that loses its replica mid-way (`on_pool`) runs again on the primary.

What counts as a write: any statement on the primary that is not a read
(`changes_data`), committed. Its position, `pg_current_wal_insert_lsn()`
after the commit, is one more statement, run only when replicas are
configured. Serving receipts are the exception (`unseen_by_reads`): no read
shows them, and every search writes one.
"""

from __future__ import annotations

import contextlib
import contextvars
import logging
import re
import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, replace
from typing import Any, TypeVar

from django.conf import settings
from django.core.signals import setting_changed
from django.db import DEFAULT_DB_ALIAS, InterfaceError, OperationalError, connections
from django.dispatch import receiver

logger = logging.getLogger("memoryhub.replicas")
T = TypeVar("T")

# Read pool states, as whoami reports them (contract 000's read_pool_ready).
READY, DEGRADED, UNAVAILABLE = "ready", "degraded", "unavailable"

# --------------------------------------------------------------------------- which connection a read uses

_reading: contextvars.ContextVar[str | None] = contextvars.ContextVar("memoryhub_read_alias", default=None)


def read_alias() -> str:
    """The database alias the read under way runs on (the primary's outside one)."""
    return _reading.get() or DEFAULT_DB_ALIAS


class _ReadConnection:
    """`django.db.connection` for the read under way: the chosen replica's
    connection inside `on_pool`, the primary's outside it."""

    def __getattr__(self, name: str) -> Any:
        return getattr(connections[read_alias()], name)

    def __setattr__(self, name: str, value: Any) -> None:
        setattr(connections[read_alias()], name, value)


read_connection: Any = _ReadConnection()


class ReadRouter:
    """The ORM's reads inside `on_pool` go where the read was sent; every
    write goes to the primary; only the primary is migrated."""

    def db_for_read(self, model: Any, **hints: Any) -> str | None:
        return _reading.get()

    def db_for_write(self, model: Any, **hints: Any) -> str:
        return DEFAULT_DB_ALIAS

    def allow_relation(self, obj1: Any, obj2: Any, **hints: Any) -> bool:
        return True  # every alias holds the same rows

    def allow_migrate(self, db: str, app_label: str, model_name: str | None = None, **hints: Any) -> bool:
        return db == DEFAULT_DB_ALIAS


def replica_aliases() -> tuple[str, ...]:
    return tuple(settings.MEMORYHUB_READ_REPLICAS)


# --------------------------------------------------------------------------- the primary's last write

_STATEMENT_READS = re.compile(
    r"\s*(SELECT|SHOW|SAVEPOINT|RELEASE|ROLLBACK|BEGIN|START|COMMIT|SET|RESET|DEALLOCATE|EXPLAIN|DECLARE|FETCH|"
    r"CLOSE|DISCARD|LISTEN|UNLISTEN|VALUES|WITH)\b", re.IGNORECASE)
_CHANGING_WORD = re.compile(r"\b(INSERT|UPDATE|DELETE|MERGE|TRUNCATE|COPY)\b", re.IGNORECASE)


def changes_data(sql: Any) -> bool:
    """Whether a statement may change what a read sees: anything but a
    statement that reads, and a read naming a change (a WITH that inserts).
    Erring towards yes only sends a read to the primary."""
    if not isinstance(sql, str):
        return True
    return not _STATEMENT_READS.match(sql) or bool(_CHANGING_WORD.search(sql))


_unseen: contextvars.ContextVar[bool] = contextvars.ContextVar("memoryhub_unseen_by_reads", default=False)


@contextlib.contextmanager
def unseen_by_reads() -> Iterator[None]:
    """Statements run inside change nothing any read shows (a serving receipt)."""
    token = _unseen.set(True)
    try:
        yield
    finally:
        _unseen.reset(token)


def counts_as_write(sql: Any) -> bool:
    return not _unseen.get() and changes_data(sql)


@dataclass(frozen=True)
class Written:
    """The primary's WAL position after its last committed write (bytes from
    0/0), and when it was recorded (seconds since the epoch)."""

    lsn: int
    at: float


NOTHING_WRITTEN = Written(lsn=0, at=0.0)

# The position only ever moves forward, whichever process records last.
_RECORD_SCRIPT = """
local current = redis.call('HGET', KEYS[1], 'lsn')
if (not current) or current < ARGV[1] then
  redis.call('HSET', KEYS[1], 'lsn', ARGV[1], 'at', ARGV[2])
end
return 1
"""
_LSN_WIDTH = 16  # hex digits: fixed width, so comparing the text compares the numbers


class _Shared:
    """This process's Redis client for the written position."""

    def __init__(self) -> None:
        from redis import Redis

        timeout = settings.MEMORYHUB_READ_REPLICA_REDIS_TIMEOUT_SECONDS
        self.redis = Redis.from_url(settings.REDIS_URL, socket_timeout=timeout, socket_connect_timeout=timeout)
        self.record_script = self.redis.register_script(_RECORD_SCRIPT)
        self.prefix = f"{settings.CACHES['default'].get('KEY_PREFIX', '')}:read-pool:written:"

    def key(self) -> str:
        """One position per primary database (its name: the tests' differ)."""
        return self.prefix + str(connections[DEFAULT_DB_ALIAS].settings_dict["NAME"])


_shared: _Shared | None = None
_shared_lock = threading.Lock()
# Until when (monotonic) this process reads only from the primary, because it
# could not record a write's position that other reads must wait for.
_distrusted_until = 0.0


def _shared_state() -> _Shared:
    global _shared
    if _shared is None:
        with _shared_lock:
            if _shared is None:
                _shared = _Shared()
    return _shared


def note_written(wrapper: Any) -> None:
    """Record the primary's WAL position after a committed write, on the
    connection that wrote it (`wrapper`, the primary's). Never raises: a write
    that committed stays committed; if its position cannot be shared, this
    process reads only from the primary for the lag bound, and the failure is
    logged."""
    global _distrusted_until
    try:
        with wrapper.cursor() as cursor:
            cursor.execute("SELECT pg_current_wal_insert_lsn() - '0/0'::pg_lsn")
            (lsn,) = cursor.fetchone()
        shared = _shared_state()
        shared.record_script(keys=[shared.key()], args=[f"{int(lsn):0{_LSN_WIDTH}x}", repr(time.time())])
    except Exception:  # noqa: BLE001 - recording must not fail the write that committed
        _distrusted_until = time.monotonic() + settings.MEMORYHUB_READ_REPLICA_MAX_LAG_SECONDS
        logger.exception("could not record the primary's write position; this process reads from the primary "
                         "for %g s", settings.MEMORYHUB_READ_REPLICA_MAX_LAG_SECONDS)


def written() -> Written:
    """The primary's last recorded write. Raises when Redis does not answer."""
    shared = _shared_state()
    values = shared.redis.hmget(shared.key(), ["lsn", "at"])
    if values[0] is None:
        return NOTHING_WRITTEN
    return Written(lsn=int(values[0], 16), at=float(values[1] or 0.0))


# --------------------------------------------------------------------------- the replicas' states

@dataclass(frozen=True)
class ReplicaState:
    alias: str
    checked: float = float("-inf")  # monotonic time of the last reading
    answered: bool = False
    in_recovery: bool = False
    replayed: int = -1  # replay position, bytes from 0/0
    error: str = ""


# Why a replica did not serve a read.
BEHIND = "behind"  # by writes committed within the lag bound: read-your-writes, not a fault
LAGGING = "lagging"
DOWN = "not answering"
PROMOTED = "promoted (no longer replaying the primary)"
DEGRADING = frozenset({LAGGING, DOWN, PROMOTED})


@dataclass(frozen=True)
class Choice:
    """Where a read goes: `alias`; for a read sent to the primary with
    replicas configured, why each replica did not serve it."""

    alias: str
    refused: tuple[tuple[str, str], ...] = ()

    @property
    def replica(self) -> bool:
        return self.alias != DEFAULT_DB_ALIAS

    @property
    def degraded(self) -> bool:
        return not self.replica and any(reason in DEGRADING for _, reason in self.refused)


class ReadPool:
    def __init__(self, aliases: tuple[str, ...]) -> None:
        self.aliases = aliases
        self.states = {alias: ReplicaState(alias) for alias in aliases}
        self._turn = 0

    def rotation(self) -> list[str]:
        """The replicas in the order this read tries them: each read starts at the next."""
        self._turn = (self._turn + 1) % len(self.aliases)
        return [*self.aliases[self._turn:], *self.aliases[:self._turn]]

    def refusal(self, alias: str, needed: Written) -> str | None:
        """None when `alias` may serve a read that must see `needed`; else why not."""
        state = self.states[alias]
        now = time.monotonic()
        if state.answered:
            stale = now - state.checked > settings.MEMORYHUB_READ_REPLICA_CHECK_SECONDS
            if stale or (state.in_recovery and state.replayed < needed.lsn):
                state = self.check(alias)
        elif now - state.checked > settings.MEMORYHUB_READ_REPLICA_RETRY_SECONDS:
            state = self.check(alias)
        if not state.answered:
            return DOWN
        if not state.in_recovery:
            return PROMOTED
        if state.replayed >= needed.lsn:
            return None
        return LAGGING if time.time() - needed.at > settings.MEMORYHUB_READ_REPLICA_MAX_LAG_SECONDS else BEHIND

    def check(self, alias: str) -> ReplicaState:
        """Read the replica's state from it (one statement)."""
        try:
            wrapper = connections[alias]
            with wrapper.cursor() as cursor:
                cursor.execute("SELECT pg_is_in_recovery(), pg_last_wal_replay_lsn() - '0/0'::pg_lsn")
                in_recovery, replayed = cursor.fetchone()
        except Exception as exc:  # noqa: BLE001 - a replica that does not answer is a state
            _discard(alias)
            state = ReplicaState(alias, checked=time.monotonic(), error=f"{type(exc).__name__}: {exc}"[:300])
            if self.states[alias].answered:
                logger.warning("read replica %s stopped answering: %s", alias, state.error)
        else:
            state = ReplicaState(alias, checked=time.monotonic(), answered=True, in_recovery=bool(in_recovery),
                                 replayed=int(replayed) if replayed is not None else -1)
            if self.states[alias].in_recovery and not state.in_recovery:
                logger.error("read replica %s is no longer in recovery (promoted?): no read is served from it", alias)
        self.states[alias] = state
        return state

    def lost(self, alias: str, error: BaseException) -> None:
        """A read lost `alias` mid-way: ask it again before it serves another."""
        _discard(alias)
        self.states[alias] = replace(self.states[alias], checked=float("-inf"))
        logger.warning("a read lost read replica %s and ran again on the primary: %s", alias, error)


def _discard(alias: str) -> None:
    with contextlib.suppress(Exception):
        connections[alias].close()


_pool: ReadPool | None = None
_pool_lock = threading.Lock()


def read_pool() -> ReadPool | None:
    """This process's read pool, or None with no replica configured."""
    global _pool
    aliases = replica_aliases()
    if not aliases:
        return None
    if _pool is None or _pool.aliases != aliases:
        with _pool_lock:
            if _pool is None or _pool.aliases != aliases:
                _pool = ReadPool(aliases)
    return _pool


@receiver(setting_changed)
def _settings_changed(*, setting: str, **kwargs: Any) -> None:
    global _pool, _shared, _distrusted_until
    if setting in ("REDIS_URL", "CACHES", "MEMORYHUB_READ_REPLICA_REDIS_TIMEOUT_SECONDS"):
        _shared = None
    if setting == "MEMORYHUB_READ_REPLICAS":
        _pool, _distrusted_until = None, 0.0


# --------------------------------------------------------------------------- choosing, and reading

def choose() -> Choice:
    """Where the read about to start is served from (see the module's text)."""
    pool = read_pool()
    if pool is None or connections[DEFAULT_DB_ALIAS].in_atomic_block:
        return Choice(DEFAULT_DB_ALIAS)
    if time.monotonic() < _distrusted_until:
        return Choice(DEFAULT_DB_ALIAS, tuple((alias, DOWN) for alias in pool.aliases))
    try:
        needed = written()
    except Exception:  # noqa: BLE001 - without the position, only the primary is sure to be current
        logger.warning("the primary's last write position could not be read: reading from the primary",
                       exc_info=True)
        return Choice(DEFAULT_DB_ALIAS, tuple((alias, DOWN) for alias in pool.aliases))
    refused = []
    for alias in pool.rotation():
        reason = pool.refusal(alias, needed)
        if reason is None:
            return Choice(alias)
        refused.append((alias, reason))
    return Choice(DEFAULT_DB_ALIAS, tuple(refused))


@contextlib.contextmanager
def reading_on(alias: str) -> Iterator[None]:
    token = _reading.set(alias)
    try:
        yield
    finally:
        _reading.reset(token)


@dataclass(frozen=True)
class Served:
    """A read's value, where it was sent, and whether it lost that replica
    and ran again on the primary."""

    value: Any
    choice: Choice
    lost: bool = False

    @property
    def degraded(self) -> bool:
        return self.lost or self.choice.degraded


def served(read: Callable[[], Any], *, choice: Choice | None = None) -> Served:
    """Run `read` (which only reads, apart from writes the router sends to
    the primary) on the read pool. When the replica it was sent to fails
    under it (stops answering, or cancels it in a conflict with recovery),
    it runs again on the primary."""
    choice = choice or choose()
    if not choice.replica:
        if choice.refused:
            _count("primary")
        return Served(read(), choice)
    try:
        with reading_on(choice.alias):
            value = read()
    except (OperationalError, InterfaceError) as exc:
        if _cancelled_by_us(exc):
            raise
        pool = read_pool()
        if pool is not None and choice.alias in pool.states:
            pool.lost(choice.alias, exc)
    else:
        _count("replica")
        return Served(value, choice)
    _count("primary_after_loss")
    return Served(read(), choice, lost=True)


def on_pool(read: Callable[[], T], *, choice: Choice | None = None) -> T:
    """`read`'s value, served from the read pool (`served`)."""
    value: T = served(read, choice=choice).value
    return value


def _count(served_by: str) -> None:
    from memoryhub.observability import READ_POOL_READS

    READ_POOL_READS.labels(served_by).inc()


def _cancelled_by_us(exc: BaseException) -> bool:
    """A statement cancelled on purpose (a deadline, a statement timeout), not
    by the replica (a conflict with recovery is a serialization failure)."""
    import psycopg

    return isinstance(exc.__cause__, psycopg.errors.QueryCanceled)


def reads_from_pool(function: Callable[..., T]) -> Callable[..., T]:
    """A service that only reads, served from the read pool."""
    import functools

    @functools.wraps(function)
    def served(*args: Any, **kwargs: Any) -> T:
        return on_pool(lambda: function(*args, **kwargs))

    return served


__all__ = [
    "BEHIND", "DEGRADED", "DOWN", "LAGGING", "PROMOTED", "READY", "UNAVAILABLE", "Choice", "ReadPool", "ReadRouter",
    "ReplicaState", "Served", "Written", "changes_data", "choose", "counts_as_write", "note_written", "on_pool",
    "read_alias", "read_connection", "read_pool", "reading_on", "reads_from_pool", "replica_aliases", "served",
    "unseen_by_reads", "written",
]
