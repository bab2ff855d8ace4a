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
  diverging), is not lagging (below), and has replayed at least to the
  position of the last write the primary committed (`note_written`, kept in
  Redis, so every process and worker shares it). That is read-your-writes
  and more: a search started after a write was answered (one's own,
  another person's, an admin's change of access rules) sees it, whichever
  replica serves it, so a revoked right is never read from a replica behind
  it. With no position recorded (a new or flushed Redis), the primary's
  position at that moment is recorded and needed;
- otherwise the primary serves the read. A replica behind only by the last
  moments' writes is normal (replication takes milliseconds); lagging (it
  has not replayed what the primary had written more than
  MEMORYHUB_READ_REPLICA_MAX_LAG_SECONDS ago, measured against the primary's
  own position), not answering, or promoted, it is a reason to report the
  pool `degraded`, and it serves nothing: that bound also limits how stale a
  read can be after a write whose position was never recorded (a process
  without DATABASE_READ_URLS, a restore).

A replica's state (in recovery, its replay position) is read from it at
most every MEMORYHUB_READ_REPLICA_CHECK_SECONDS per process (with the
primary's position), and again whenever the position a read needs is beyond
what was last read; a replica that does not answer is asked again after
MEMORYHUB_READ_REPLICA_RETRY_SECONDS. A read that loses its replica mid-way
(`served`) runs again on the primary.

What counts as a write: any statement on the primary that is not a read
(`changes_data`), committed. Its position, `pg_current_wal_insert_lsn()`
after the commit, is one more statement, run only when replicas are
configured, before the write is answered. Serving receipts are the
exception (`unseen_by_reads`): no read shows them, and every search writes
one.
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

    def db_for_read(self, model: Any, **hints: Any) -> str:
        # Outside a read, the primary, even for a row a replica served (its related rows, loaded later).
        return _reading.get() or DEFAULT_DB_ALIAS

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


# The position only ever moves forward, whichever process records last.
_RECORD_SCRIPT = """
local current = redis.call('GET', KEYS[1])
if (not current) or current < ARGV[1] then
  redis.call('SET', KEYS[1], ARGV[1])
end
return 1
"""
_REPLACE_SCRIPT = """
if redis.call('GET', KEYS[1]) == ARGV[1] then
  redis.call('SET', KEYS[1], ARGV[2])
end
return 1
"""
_LSN_WIDTH = 16  # hex digits: fixed width, so comparing the text compares the numbers
_POSITION = "SELECT pg_current_wal_insert_lsn() - '0/0'::pg_lsn, current_setting('wal_block_size')::int"
# A WAL page starts with a header: 24 bytes, 40 on a segment's first page. The
# insert position after a record that ended a page is past the next page's
# header, where no replica's replay position ever stops.
_PAGE_HEADERS = (24, 40)


class _Shared:
    """This process's Redis client for the written position."""

    def __init__(self) -> None:
        from redis import Redis

        timeout = settings.MEMORYHUB_READ_REPLICA_REDIS_TIMEOUT_SECONDS
        self.redis = Redis.from_url(settings.REDIS_URL, socket_timeout=timeout, socket_connect_timeout=timeout)
        self.record_script = self.redis.register_script(_RECORD_SCRIPT)
        self.replace_script = self.redis.register_script(_REPLACE_SCRIPT)
        self.prefix = f"{settings.CACHES['default'].get('KEY_PREFIX', '')}:read-pool:written-position:"

    def key(self) -> str:
        """One position per primary database (its name: the tests' differ)."""
        return self.prefix + str(connections[DEFAULT_DB_ALIAS].settings_dict["NAME"])

    def record(self, lsn: int) -> None:
        self.record_script(keys=[self.key()], args=[f"{lsn:0{_LSN_WIDTH}x}"])

    def recorded(self) -> int | None:
        value = self.redis.get(self.key())
        return None if value is None else int(value, 16)

    def replace(self, expected: int, lsn: int) -> None:
        """Set the position to `lsn`, lower, if it still is `expected` (a
        record no position of this primary reaches); a position recorded
        since stays."""
        self.replace_script(keys=[self.key()], args=[f"{expected:0{_LSN_WIDTH}x}", f"{lsn:0{_LSN_WIDTH}x}"])


_shared: _Shared | None = None
_lock = threading.Lock()
# A committed write's position this process could not share yet: no replica
# serves this process's reads before replaying it, and it is shared again at
# the next read. Until when (monotonic) this process reads only from the
# primary, because a write's position could not even be read.
_unshared = 0
_distrusted_until = 0.0


def _shared_state() -> _Shared:
    global _shared
    if _shared is None:
        with _lock:
            if _shared is None:
                _shared = _Shared()
    return _shared


def _position(wrapper: Any) -> int:
    """The primary's WAL position now (on `wrapper`, the primary's
    connection): where everything written so far ends."""
    with wrapper.cursor() as cursor:
        cursor.execute(_POSITION)
        position, block = cursor.fetchone()
    position = int(position)
    into_page = position % block
    return position - into_page if into_page in _PAGE_HEADERS else position


def note_written(wrapper: Any) -> None:
    """Record the primary's WAL position after a committed write, read on the
    connection that wrote it (`wrapper`, the primary's). Never raises: a write
    that committed stays committed. A position Redis did not take is kept by
    this process and shared again before its next read; a position that
    could not be read keeps this process on the primary for the lag bound.
    Both are logged."""
    global _unshared, _distrusted_until
    try:
        lsn = _position(wrapper)
    except Exception:  # noqa: BLE001 - recording must not fail the write that committed
        _distrusted_until = time.monotonic() + settings.MEMORYHUB_READ_REPLICA_MAX_LAG_SECONDS
        logger.exception("could not read the primary's position after a write; this process reads from the "
                         "primary for %g s", settings.MEMORYHUB_READ_REPLICA_MAX_LAG_SECONDS)
        return
    try:
        _shared_state().record(lsn)
    except Exception:  # noqa: BLE001
        with _lock:
            _unshared = max(_unshared, lsn)
        logger.exception("could not share the primary's position after a write; this process's reads wait "
                         "for a replica that has replayed it")


def written() -> int | None:
    """The primary's last recorded write position, None when none is
    recorded. Raises when Redis does not answer."""
    return _shared_state().recorded()


@dataclass(frozen=True)
class Needed:
    """What a replica must have replayed to serve a read: `position`, from
    `recorded` (the position in Redis, None when none was) and this
    process's own writes Redis did not take; read before `read_at`
    (monotonic)."""

    position: int
    recorded: int | None
    read_at: float


def _needed() -> Needed:
    """The position a replica must have replayed to serve the read about to
    start: the primary's last recorded write, and this process's own that
    Redis did not take yet (shared again now). With none recorded (a new
    Redis, a flushed or evicted key), the primary's position now is recorded
    and needed: a missing record must not let a replica behind serve.
    Raises when Redis or the primary does not answer."""
    global _unshared
    shared = _shared_state()
    unshared = _unshared
    if unshared:
        shared.record(unshared)
        with _lock:
            if _unshared == unshared:
                _unshared = 0
    recorded = shared.recorded()
    if recorded is None:
        position = _position(connections[DEFAULT_DB_ALIAS])
        shared.record(position)
        logger.warning("no position of the primary's last write was recorded: recorded its position now")
        return Needed(max(position, _unshared), None, time.monotonic())
    return Needed(max(recorded, _unshared), recorded, time.monotonic())


# --------------------------------------------------------------------------- the replicas' states

NEVER = float("-inf")


@dataclass(frozen=True)
class ReplicaState:
    alias: str
    checked: float = NEVER  # monotonic time of the last reading
    answered: bool = False
    in_recovery: bool = False
    replayed: int = -1  # replay position, bytes from 0/0
    # The latest moment (monotonic) it is known to have replayed everything
    # the primary had written then: its lag is the time since.
    caught_up_at: float = NEVER
    # The primary's position read just before (None: it did not answer), and when.
    primary: int | None = None
    primary_at: float = NEVER
    error: str = ""


# Why a replica did not serve a read.
BEHIND = "behind"  # by writes of the last moments: read-your-writes, not a fault
LAGGING = "lagging"
DOWN = "not_answering"
PROMOTED = "promoted"
UNKNOWN = "position_unknown"
DEGRADING = frozenset({LAGGING, DOWN, PROMOTED, UNKNOWN})
# Each reason in words (for /readyz).
SAID = {
    BEHIND: "catching up with the last writes", LAGGING: "lagging beyond its bound", DOWN: "not answering",
    PROMOTED: "promoted (no longer replaying the primary)", UNKNOWN: "the primary's last write position not known",
}


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
        self._checking = {alias: threading.Lock() for alias in aliases}
        # The primary's position as last read, and the one before: (position, monotonic time).
        self.primary_seen: tuple[tuple[int, float], ...] = ()
        self._turn = 0

    def rotation(self) -> list[str]:
        """The replicas in the order this read tries them: each read starts at the next."""
        self._turn = (self._turn + 1) % len(self.aliases)
        return [*self.aliases[self._turn:], *self.aliases[:self._turn]]

    def refusal(self, alias: str, needed: Needed) -> str | None:
        """None when `alias` may serve a read that must see the primary's
        writes up to `needed`; else why not."""
        state = self.states[alias]
        now = time.monotonic()
        if state.answered:
            stale = now - state.checked > settings.MEMORYHUB_READ_REPLICA_CHECK_SECONDS
            if stale or (state.in_recovery and state.replayed < needed.position):
                state = self.check(alias)
        elif now - state.checked > settings.MEMORYHUB_READ_REPLICA_RETRY_SECONDS:
            state = self.check(alias)
        if not state.answered:
            return DOWN
        if not state.in_recovery:
            return PROMOTED
        if time.monotonic() - state.caught_up_at > settings.MEMORYHUB_READ_REPLICA_MAX_LAG_SECONDS:
            return LAGGING
        if state.replayed >= needed.position:
            return None
        if (state.primary is not None and state.primary_at > needed.read_at and needed.recorded is not None
                and needed.recorded > state.primary):
            # Recorded beyond where the primary was after the record was read: no write of this primary
            # (Redis restored from another time, the database restored or rebuilt under its name). Its
            # position then takes the record's place, and is needed.
            logger.error("the recorded position of the primary's last write is beyond the primary's own: "
                         "replaced by the primary's position")
            with contextlib.suppress(Exception):
                _shared_state().replace(needed.recorded, state.primary)
            return None if state.replayed >= max(state.primary, _unshared) else BEHIND
        return BEHIND

    def check(self, alias: str) -> ReplicaState:
        """Read the replica's state from it (one statement), with the primary's
        position just before (one more). One thread checks a replica at a
        time: the others go on with what was last read, but for a replica
        not read yet (or lost by a read), which they wait for (at most its
        connect timeout and a second; past that it counts as not answering)."""
        checking = self._checking[alias]
        first = self.states[alias].checked == NEVER
        if first:
            wait = float(connections[alias].settings_dict["OPTIONS"].get("connect_timeout", 2)) + 1.0
            if not checking.acquire(timeout=wait):
                return replace(self.states[alias], answered=False)
        elif not checking.acquire(blocking=False):
            return self.states[alias]
        try:
            if first and self.states[alias].checked != NEVER:
                return self.states[alias]  # read by the thread this one waited for
            return self._check(alias)
        finally:
            checking.release()

    def _check(self, alias: str) -> ReplicaState:
        before = self.states[alias]
        primary_at = time.monotonic()
        primary = self._see_primary()
        try:
            with connections[alias].cursor() as cursor:
                cursor.execute("SELECT pg_is_in_recovery(), pg_last_wal_replay_lsn() - '0/0'::pg_lsn, "
                               "extract(epoch FROM now() - pg_last_xact_replay_timestamp())")
                in_recovery, replayed, replay_age = cursor.fetchone()
        except Exception as exc:  # noqa: BLE001 - a replica that does not answer is a state
            _discard(alias)
            state = ReplicaState(alias, checked=time.monotonic(), error=f"{type(exc).__name__}: {exc}"[:300])
            if before.answered or before.checked == NEVER:
                logger.warning("read replica %s does not answer: %s", alias, state.error)
            self.states[alias] = state
            return state
        now = time.monotonic()
        replayed = int(replayed) if replayed is not None else -1
        # When it last had replayed all the primary had written: the primary's positions read at the
        # last two checks, and the time of the last commit it replayed (a commit's time comes before
        # its record is written).
        caught_up_at = max([before.caught_up_at if before.answered else NEVER,
                            *(seen_at for position, seen_at in self.primary_seen if replayed >= position),
                            now - max(0.0, float(replay_age)) if replay_age is not None else NEVER])
        state = ReplicaState(alias, checked=now, answered=True, in_recovery=bool(in_recovery), replayed=replayed,
                             caught_up_at=caught_up_at, primary=primary, primary_at=primary_at)
        if before.in_recovery and not state.in_recovery:
            logger.error("read replica %s is no longer in recovery (promoted?): no read is served from it", alias)
        self.states[alias] = state
        return state

    def _see_primary(self) -> int | None:
        """The primary's position now, kept with the one before; None when it does not answer."""
        try:
            position = _position(connections[DEFAULT_DB_ALIAS])
        except Exception:  # noqa: BLE001 - without it, lag is read from the replica's own replay time
            logger.warning("could not read the primary's position for the replicas' lag", exc_info=True)
            return None
        self.primary_seen = (*self.primary_seen[-1:], (position, time.monotonic()))
        return position

    def lost(self, alias: str, error: BaseException) -> None:
        """A read lost `alias` mid-way: its pooled connections are dropped, and
        the next read asks it again (unless a reading since already found it
        down)."""
        _discard(alias)
        current = self.states[alias]
        if current.answered:
            self.states[alias] = replace(current, answered=False, checked=NEVER)
        logger.warning("a read lost read replica %s and ran again on the primary: %s", alias, error)


def _discard(alias: str) -> None:
    """Drop this thread's connection to `alias` and the process's pooled ones
    (after a restart of the replica, each would fail a read in turn)."""
    wrapper: Any = connections[alias]
    with contextlib.suppress(Exception):
        wrapper.close()
    with contextlib.suppress(Exception):
        wrapper.close_pool()


_pool: ReadPool | None = None


def read_pool() -> ReadPool | None:
    """This process's read pool, or None with no replica configured."""
    global _pool
    aliases = replica_aliases()
    if not aliases:
        return None
    if _pool is None or _pool.aliases != aliases:
        with _lock:
            if _pool is None or _pool.aliases != aliases:
                _pool = ReadPool(aliases)
    return _pool


@receiver(setting_changed)
def _settings_changed(*, setting: str, **kwargs: Any) -> None:
    global _pool, _shared, _distrusted_until, _unshared
    if setting in ("REDIS_URL", "CACHES", "MEMORYHUB_READ_REPLICA_REDIS_TIMEOUT_SECONDS"):
        _shared = None
    if setting == "MEMORYHUB_READ_REPLICAS":
        _pool, _distrusted_until, _unshared = None, 0.0, 0


# --------------------------------------------------------------------------- choosing, and reading

def choose() -> Choice:
    """Where the read about to start is served from (see the module's text)."""
    pool = read_pool()
    if pool is None:
        return Choice(DEFAULT_DB_ALIAS)
    primary = connections[DEFAULT_DB_ALIAS]
    if primary.in_atomic_block or (primary.connection is not None and not primary.get_autocommit()):
        return Choice(DEFAULT_DB_ALIAS)  # the caller's transaction: it may hold writes no one else sees
    if time.monotonic() < _distrusted_until:
        return Choice(DEFAULT_DB_ALIAS, tuple((alias, UNKNOWN) for alias in pool.aliases))
    try:
        needed = _needed()
    except Exception:  # noqa: BLE001 - without the position, only the primary is sure to be current
        logger.warning("the primary's last write position could not be read: reading from the primary",
                       exc_info=True)
        return Choice(DEFAULT_DB_ALIAS, tuple((alias, UNKNOWN) for alias in pool.aliases))
    refused = []
    for alias in pool.rotation():
        reason = pool.refusal(alias, needed)
        if reason is None:
            return Choice(alias)
        refused.append((alias, reason))
    return Choice(DEFAULT_DB_ALIAS, tuple(refused))


def report() -> dict[str, str | None]:
    """Each replica and why it would not serve a read starting now (None: it
    would), for /readyz; empty with no replica configured."""
    pool = read_pool()
    if pool is None:
        return {}
    try:
        needed = _needed()
    except Exception:  # noqa: BLE001 - reported as the state it is
        return dict.fromkeys(pool.aliases, UNKNOWN)
    return {alias: pool.refusal(alias, needed) for alias in pool.aliases}


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
    the primary) on the read pool: where `choice` says, else where `choose`
    does. A read inside another stays on that read's connection. When the
    replica it was sent to fails under it (stops answering, or cancels it in
    a conflict with recovery), it runs again on the primary; a read that ran
    once on the replica has then recorded any enforcement alarm it found,
    and the run on the primary records what it finds."""
    within = _reading.get()
    if within is not None:
        return Served(read(), Choice(within))
    choice = choice or choose()
    if not choice.replica:
        if not choice.refused:
            return Served(read(), choice)
        reasons = {reason for _, reason in choice.refused}
        _count("primary", BEHIND if BEHIND in reasons else choice.refused[0][1])
        with reading_on(DEFAULT_DB_ALIAS):
            return Served(read(), choice)
    try:
        with reading_on(choice.alias):
            value = read()
    except (OperationalError, InterfaceError) as exc:
        if _cancelled_by_us(exc) or _raised_by_primary(exc):
            raise
        pool = read_pool()
        if pool is not None and choice.alias in pool.states:
            pool.lost(choice.alias, exc)
    else:
        _count("replica", "caught_up")
        return Served(value, choice)
    _count("primary_after_loss", "lost")
    with reading_on(DEFAULT_DB_ALIAS):
        return Served(read(), choice, lost=True)


def on_pool(read: Callable[[], T], *, choice: Choice | None = None) -> T:
    """`read`'s value, served from the read pool (`served`)."""
    value: T = served(read, choice=choice).value
    return value


def _count(served_by: str, why: str) -> None:
    from memoryhub.observability import READ_POOL_READS

    READ_POOL_READS.labels(served_by, why).inc()


def _cancelled_by_us(exc: BaseException) -> bool:
    """A statement cancelled on purpose (a deadline, a statement timeout), not
    by the replica (a conflict with recovery is a serialization failure)."""
    import psycopg

    return isinstance(exc.__cause__, psycopg.errors.QueryCanceled)


def _raised_by_primary(exc: BaseException) -> bool:
    """The error came from the primary's connection (a write the read sends
    there, such as an enforcement alarm), not from the replica's."""
    failed = getattr(exc.__cause__, "pgconn", None)
    primary = connections[DEFAULT_DB_ALIAS].connection
    return failed is not None and primary is not None and failed is primary.pgconn


def reads_from_pool(function: Callable[..., T]) -> Callable[..., T]:
    """A service that only reads, served from the read pool."""
    import functools

    @functools.wraps(function)
    def served_read(*args: Any, **kwargs: Any) -> T:
        return on_pool(lambda: function(*args, **kwargs))

    return served_read


__all__ = [
    "BEHIND", "DEGRADED", "DOWN", "LAGGING", "PROMOTED", "READY", "SAID", "UNAVAILABLE", "UNKNOWN", "Choice",
    "Needed", "ReadPool", "ReadRouter", "ReplicaState", "Served", "changes_data", "choose", "counts_as_write",
    "note_written", "on_pool", "read_alias", "read_connection", "read_pool", "reading_on", "reads_from_pool",
    "replica_aliases", "report", "served",
]
