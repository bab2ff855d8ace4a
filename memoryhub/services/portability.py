"""Memory a person can take with them, and memory an admin can erase.

Export: a person's own memory as JSON Lines (`memoryhub-memory/1`): a header,
every fragment they own (live, superseded, forgotten or erased) with its
provenance and grounding as they may be told them now, and every serving
receipt of their own reads, with its request and its entry in the workspace's
receipt chain (so they can check the entry's hash themselves with
contract/receipt_chain.py). Nothing in it is more than the person may read:
their own rows, documents' titles only where they may read the document, and
of what their reads served only the ids and value hashes the receipts keep.

Erasure: a workspace admin destroys a person's memory outright (a deletion
request). Every fragment they own keeps its row as a tombstone with no value,
context, subject, link or vector, retired as of the instant it was recorded,
so no read of any instant serves it; their idempotency records go too. The
receipts that served those fragments are not touched: they keep the ids and
value hashes they recorded, the chain still verifies, and the erasure itself
is recorded (who, by whom, when, which fragments) and exported beside the
chain. After the commit the fragment table is vacuumed and the indexes that
held the values' words are rebuilt, so no row and no index entry keeps them;
a storage rewrite (VACUUM FULL, a maintenance step) also clears the bytes
PostgreSQL leaves in freed page space. The person's own receipts keep their
queries: they are the workspace's record of what was served, and hold no
value. WAL archives and backups taken before the erasure still hold the
values until they expire.
"""

from __future__ import annotations

import contextlib
import datetime as dt
import logging
import time
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import psycopg
from django.db import DatabaseError, OperationalError, connection, transaction
from django.db.models import F
from django.utils import timezone

from memoryhub import access
from memoryhub.access import Caller
from memoryhub.celery import app as celery_app
from memoryhub.errors import Conflict, InvalidArgument
from memoryhub.models import Erasure, Fragment, IdempotencyRecord, Receipt
from memoryhub.services.fragments import fragment_views
from memoryhub.services.members import member_get
from memoryhub.services.receipt_chain import export_snapshot, instant, record_of
from memoryhub.services.write import Writer

logger = logging.getLogger("memoryhub.portability")
EXPORT_FORMAT = "memoryhub-memory/1"
CLEAN_TASK = "memoryhub.tasks.clean_erased_storage"
_BATCH = 500


def _when(value: dt.datetime | None) -> str | None:
    return instant(value) if value is not None else None


def memory_export(*, caller: Caller) -> Iterator[dict[str, Any]]:
    """The caller's own memory and receipts, as export items, read in one snapshot."""
    user = access.require_person(caller, what="export their memory")
    with export_snapshot():
        yield {"kind": "memory_export", "format": EXPORT_FORMAT, "workspace": caller.tenant.slug,
               "person": user.username, "exported_at": instant(timezone.now())}
        fragments = (access.with_access_facts(Fragment.objects.filter(access.own_fragments(caller)))
                     .select_related("collection").defer("embedding", "search_vector").order_by("recorded_at", "pk"))
        batch: list[Fragment] = []
        for fragment in fragments.iterator(chunk_size=_BATCH):
            batch.append(fragment)
            if len(batch) == _BATCH:
                yield from _fragment_items(caller, batch)
                batch = []
        yield from _fragment_items(caller, batch)
        for receipt in Receipt.objects.filter(access.own_receipts(caller)).order_by("chain_seq").iterator(
                chunk_size=_BATCH):
            yield {"kind": "receipt", "id": receipt.pk, "created_at": instant(receipt.created_at),
                   "request": receipt.request, "request_salt": receipt.request_salt, "client_id": receipt.client_id,
                   "chain": {"seq": receipt.chain_seq, "prev": receipt.chain_prev, "hash": receipt.chain_hash,
                             "record": record_of(receipt)}}


def memory_export_for(*, caller: Caller, username: str) -> Iterator[dict[str, Any]]:
    """A person's export made by the deployment's operator (`manage.py
    memory_export`, e.g. to answer an access request): exactly what the person
    would download themselves. Workspace admins cannot: they do not read
    anyone's private memory."""
    access.require_system(caller)
    person = member_get(caller=caller, username=username).user
    return memory_export(caller=access.owner_for_export(caller, user=person))


def _fragment_items(caller: Caller, fragments: list[Fragment]) -> Iterator[dict[str, Any]]:
    if not fragments:
        return
    for view in fragment_views(caller, fragments):
        fragment = view.fragment
        yield {
            "kind": "fragment", "id": str(fragment.pk), "value": fragment.value,
            "created_at": _when(fragment.created_at), "recorded_at": _when(fragment.recorded_at),
            "status": fragment.retired_reason or "live", "retired_at": _when(fragment.retired_at),
            "grounding_status": view.grounding, "grounding_note": view.grounding_note,
            "confidence": fragment.confidence, "agents": view.agents,
            "documents": [{"id": d.id, "title": d.title, "uri": d.uri} for d in view.resources],
            "session_id": fragment.session_id, "client": view.app_name or fragment.client_id,
            # The key of the hash receipts keep of this value (contract/receipt_chain.value_hash).
            "value_salt": fragment.value_salt,
        }


# --------------------------------------------------------------------------- erasure


@dataclass(frozen=True)
class ErasureResult:
    username: str
    fragments: int
    erasure: Erasure | None  # None: nothing left to erase


def memory_erase(*, caller: Caller, user_id: int, confirm: str) -> ErasureResult:
    """Destroy every value of a person's own memory (their private fragments,
    live or retired); an admin of the workspace only, who confirms by typing
    the person's username. The storage is cleaned after the commit by a task
    (`storage_clean_due`), which the beat retries until it is done."""
    access.require_admin(caller)
    person = member_get(caller=caller, user_id=user_id).user
    if confirm != person.username:
        raise InvalidArgument(f"Type {person.username} exactly to erase their memory.", field="confirm")
    subject = access.subject_of(user=person)
    with transaction.atomic():
        # The write pipeline's per-writer lock: no write of theirs lands half-erased.
        Writer(tenant=caller.tenant, user=person).hold()
        rows = Fragment.objects.filter(tenant=caller.tenant, owner_user=person).exclude(
            retired_reason=Fragment.Retired.ERASED)
        ids = [str(pk) for pk in rows.values_list("pk", flat=True)]
        # A write's first answer, kept for retries, is the person's too.
        IdempotencyRecord.objects.filter(tenant=caller.tenant, principal=access.principal_key_of(user=person)).delete()
        if not ids:
            return ErasureResult(username=person.username, fragments=0, erasure=None)
        Fragment.resources.through.objects.filter(fragment_id__in=ids).delete()
        erased = Fragment.objects.filter(pk__in=ids).update(
            value="", context="", subject_key="", content_hash="", resource_ref="", session_id="", value_salt="",
            embedding=None, embedded_at=None, grounded_versions={}, successor=None,
            retired_at=F("recorded_at"), retired_reason=Fragment.Retired.ERASED,
        )
        erasure = Erasure.objects.create(tenant=caller.tenant, subject=subject, erased_by=caller.subject or caller.kind,
                                         fragment_ids=ids)
        transaction.on_commit(lambda: celery_app.send_task(CLEAN_TASK), robust=True)  # the beat retries
    return ErasureResult(username=person.username, fragments=erased, erasure=erasure)


def memory_erase_named(*, caller: Caller, username: str, rewrite_storage: bool = False) -> ErasureResult:
    """The command's erasure, by username; with `rewrite_storage` the fragment
    table is rewritten at once (VACUUM FULL: reads and writes of memory wait
    while it runs), so no page keeps the old bytes either."""
    person = member_get(caller=caller, username=username).user
    done = memory_erase(caller=caller, user_id=person.pk, confirm=person.username)
    if rewrite_storage:
        _storage_rewritten(done)
    return done


# How long an asked-for rewrite waits for what holds it back: a transaction
# older than the erasure, or a cleaning run already at it (the one the
# erasure's commit sends off, say).
REWRITE_WAIT_SECONDS = 60.0
_REWRITE_RETRY_SECONDS = 0.2
# How long VACUUM FULL waits for its lock on a table past deadlock_timeout
# (when PostgreSQL cancels an autovacuum in its way: a lock_timeout no longer
# than that would give up first). While it waits, every read and write of
# memory queues behind it; a session that holds the table for longer (one
# idle in a transaction that read it) makes it give up, and the next try
# comes after a longer pause, so memory is held up for at most that long in
# every _TABLE_RETRY_SECONDS.
REWRITE_LOCK_WAIT_MS = 1000
_TABLE_RETRY_SECONDS = 5.0
TABLE_HELD = "a session held the fragment table longer than the rewrite may keep memory waiting"


def _storage_rewritten(done: ErasureResult) -> None:
    """The rewrite an operator asked for, once nothing holds it back; never
    skipped in silence: past REWRITE_WAIT_SECONDS it is refused (Conflict),
    saying the erasure itself is done."""
    gives_up = time.monotonic() + REWRITE_WAIT_SECONDS
    while isinstance(held := _storage_clean(rewrite=True), str):
        if time.monotonic() >= gives_up:
            raise Conflict(
                f"Erased {done.fragments} memories of {done.username}, but the storage was not rewritten: {held}. "
                "Run the erasure again with --rewrite-storage once that has ended; the erasure stays recorded, and "
                "the beat cleans what it can meanwhile.")
        _pause(_TABLE_RETRY_SECONDS if held == TABLE_HELD else _REWRITE_RETRY_SECONDS)


def _pause(seconds: float) -> None:
    time.sleep(seconds)


# Since when the oldest other session holds back what VACUUM may remove (None:
# none does), and whether one whose start this role may not read does: in this
# database a snapshot, or a transaction id without one (a transaction that
# wrote, idle between statements at read committed, holds no snapshot, yet
# VACUUM keeps every row version deleted after it began), and a prepared
# transaction. For a rewrite (VACUUM FULL, the first parameter) also a
# transaction id or a prepared transaction in any other database of the
# cluster: VACUUM FULL kept an erased row's bytes while a transaction that had
# written in another database, begun before the erasure, was open (a snapshot
# there did not; a plain VACUUM ignores both). Without pg_read_all_stats a
# role reads no other role's start times.
_OLDEST_SNAPSHOT = """
SELECT min(since), coalesce(bool_or(since IS NULL), false) FROM (
    SELECT coalesce(xact_start, query_start) AS since FROM pg_stat_activity
     WHERE pid <> pg_backend_pid()
       AND CASE WHEN datname = current_database() THEN backend_xmin IS NOT NULL OR backend_xid IS NOT NULL
                ELSE %(cluster)s AND backend_xid IS NOT NULL END
    UNION ALL
    SELECT prepared FROM pg_prepared_xacts WHERE database = current_database() OR %(cluster)s
) AS holders
"""
_CLEANING_LOCK = 0x6D656D6F72796875  # one cleaning run at a time, deployment-wide

# The indexes that hold words of a fragment's value, its subject or its hash.
_TEXT_INDEXES = ("fragment_search_vector_gin", "fragment_subject", "fragment_content_hash")


def storage_clean_due(*, rewrite: bool = False) -> int:
    """Take erased values' old row versions out of the fragment table and its
    statistics (VACUUM ANALYZE) and rebuild, without blocking reads, the
    indexes that held their words (a GIN index keeps a word as a key after its
    last row is gone); then mark the erasures clean. Idempotent: the beat runs
    it until no erasure waits. While a session holds a snapshot older than an
    erasure (a long export, say) it does nothing: VACUUM could not remove what
    that snapshot sees, and a concurrent REINDEX would wait for it. What VACUUM
    frees inside a page is reused, not zeroed: `rewrite` rewrites the table
    and every index instead, as a maintenance step. Returns the erasures cleaned."""
    cleaned = _storage_clean(rewrite=rewrite)
    return cleaned if isinstance(cleaned, int) else 0


def _storage_clean(*, rewrite: bool) -> int | str:
    """storage_clean_due's work: the erasures cleaned, or what held it back."""
    waiting = dict(Erasure.objects.filter(storage_cleaned_at__isnull=True).values_list("pk", "erased_at"))
    if not waiting and not rewrite:
        return 0
    if connection.in_atomic_block:
        raise RuntimeError("the storage is cleaned outside any transaction (VACUUM cannot run inside one)")
    # The small link table first: a rewrite that gives up on the fragment table
    # has then rewritten nothing large for its next try to do again.
    tables = (Fragment.resources.through._meta.db_table, Fragment._meta.db_table)
    with connection.cursor() as cursor:
        cursor.execute("SELECT pg_try_advisory_lock(%s)", [_CLEANING_LOCK])
        if not cursor.fetchone()[0]:
            return "another cleaning run is at it"
        try:
            # A snapshot older than an erasure still sees its row versions: VACUUM would keep them
            # and a concurrent REINDEX would wait for it. Come back when it has ended.
            cursor.execute(_OLDEST_SNAPSHOT, {"cluster": rewrite})
            oldest, unknown = cursor.fetchone()
            if oldest is not None and any(oldest <= erased_at for erased_at in waiting.values()):
                logger.info("an erasure waits for a snapshot older than it (since %s) to end", oldest)
                return f"a transaction older than the erasure, open since {oldest.isoformat()}, still holds its rows"
            if rewrite and unknown and waiting:
                # Another role's transaction, of an age this role may not read: it may be older.
                return "a transaction of another role, whose start this role may not read, may still hold its rows"
            if rewrite:
                if not _rewritten(cursor, tables):
                    return TABLE_HELD
            else:
                for table in tables:
                    cursor.execute(f'VACUUM (ANALYZE, INDEX_CLEANUP ON) "{table}"')
                for index in _TEXT_INDEXES:
                    cursor.execute(f'REINDEX INDEX CONCURRENTLY "{index}"')
        finally:
            cursor.execute("SELECT pg_advisory_unlock(%s)", [_CLEANING_LOCK])
    return Erasure.objects.filter(pk__in=list(waiting)).update(storage_cleaned_at=timezone.now())


def _rewritten(cursor: Any, tables: tuple[str, ...]) -> bool:
    """VACUUM FULL of each table, each waiting for its lock no longer than
    deadlock_timeout and REWRITE_LOCK_WAIT_MS more; False when one gave up.
    The session's own lock_timeout is put back after (the connection goes
    back to the pool)."""
    cursor.execute("SELECT (extract(epoch FROM current_setting('deadlock_timeout')::interval) * 1000)::bigint")
    deadlock_ms = cursor.fetchone()[0]
    with _session_setting(cursor, "lock_timeout", f"{deadlock_ms + REWRITE_LOCK_WAIT_MS}ms"):
        for table in tables:
            try:
                cursor.execute(f'VACUUM (FULL, ANALYZE) "{table}"')
            except OperationalError as exc:
                if not isinstance(exc.__cause__, psycopg.errors.LockNotAvailable):
                    raise
                logger.info("the storage rewrite gave up waiting for its lock on %s", table)
                return False
    return True


@contextlib.contextmanager
def _session_setting(cursor: Any, name: str, value: str) -> Iterator[None]:
    """`name` set to `value` for this session while the block runs, then put
    back as it was (on an error too, without hiding it)."""
    cursor.execute("SELECT current_setting(%s)", [name])
    before = cursor.fetchone()[0]
    cursor.execute("SELECT set_config(%s, %s, false)", [name, value])
    try:
        yield
    except BaseException:
        with contextlib.suppress(DatabaseError):  # the error that stopped it is the one to see
            cursor.execute("SELECT set_config(%s, %s, false)", [name, before])
        raise
    cursor.execute("SELECT set_config(%s, %s, false)", [name, before])
