"""Memory a person can take with them (export) and memory an admin can erase
(a deletion request): the export holds nothing the person may not read; an
erasure leaves nothing of the values in any table or index, while the
receipts that served them keep their hashes and the chain still verifies."""

from __future__ import annotations

import datetime as dt
import json
import subprocess
import sys
import threading
import time
from pathlib import Path

import psycopg
import pytest
from django.core.management import call_command
from django.db import connection, connections
from django.utils import timezone

from contract import receipt_chain as chain_format
from memoryhub.errors import InvalidArgument, NotFound, PermissionDenied
from memoryhub.models import AccessRule, Erasure, Fragment, IdempotencyRecord, Receipt
from memoryhub.services import enrichment, portability, receipt_chain
from memoryhub.services.fragments import fragment_forget, fragment_write
from memoryhub.services.ingest import document_upsert, document_validated
from memoryhub.services.receipts import receipt_replay
from memoryhub.services.search import fragments_search
from tests.conftest import make_people, signed_in
from tests.ingest.conftest import doc

ROOT = Path(__file__).resolve().parents[2]
# Words no stemmer shortens and nothing else in the suite says.
MARKER = "quokkalantern"
SECOND = "zephyrmarmot"


def _write(caller, content: str, **extra) -> str:
    outcome = fragment_write(caller=caller, content=content, **extra)
    assert outcome.results[0].operation == "stored", outcome
    return outcome.results[0].fragment_id


def _items(lines) -> list[dict]:
    return [json.loads(line) for line in lines if line.strip()]


# --------------------------------------------------------------------------- export


def test_a_person_exports_their_own_memory_and_receipts(people):
    bruno = people.caller(people.bruno)
    kept = _write(bruno, f"My favourite tea is {MARKER} oolong.")
    forgotten = _write(bruno, f"My old desk was by the {SECOND} window.")
    fragment_forget(caller=bruno, fragment_id=forgotten)
    _write(people.caller(people.cleo), "Cleo's private note about the reorg.")
    read = fragments_search(caller=bruno, query="favourite tea")
    items = list(portability.memory_export(caller=bruno))
    assert items[0] == {**items[0], "kind": "memory_export", "format": "memoryhub-memory/1", "workspace": "acme",
                        "person": "bruno"}
    fragments = {item["id"]: item for item in items if item["kind"] == "fragment"}
    assert set(fragments) == {kept, forgotten}
    assert fragments[kept]["value"] == f"My favourite tea is {MARKER} oolong." and fragments[kept]["status"] == "live"
    assert fragments[forgotten]["status"] == "forgotten" and fragments[forgotten]["retired_at"]
    assert fragments[kept]["grounding_status"] == "stated" and fragments[kept]["client"] == "test-client"
    receipts = [item for item in items if item["kind"] == "receipt"]
    assert [r["id"] for r in receipts] == [read.receipt_id]
    receipt = receipts[0]
    assert receipt["request"]["query"] == "favourite tea"
    # The person can check their receipt's entry in the chain themselves.
    chain = receipt["chain"]
    assert chain["record"]["request_hmac"] == chain_format.request_hash(receipt["request"], receipt["request_salt"])
    assert chain["record"]["served"][0][1] == chain_format.value_hash(fragments[kept]["value"],
                                                                      fragments[kept]["value_salt"])
    assert chain["hash"] == chain_format.link_hash(chain["prev"], chain["seq"],
                                                   chain_format.content_hash(chain["record"]))
    assert "Cleo" not in json.dumps(items)


def test_an_export_never_holds_a_document_the_person_may_not_read(people):
    document_upsert(source=people.wiki, document=document_validated(**doc("handbook/oncall.md", "Rota text.")))
    bruno = people.caller(people.bruno)
    fragment_id = _write(bruno, "I cover the on-call rotation on Mondays.", resource="handbook/oncall.md")
    enrichment.fragments_link_documents(fragment_ids=[fragment_id])
    shown = next(i for i in portability.memory_export(caller=bruno) if i["kind"] == "fragment")
    assert shown["documents"] == [{"id": "handbook/oncall.md", "title": "On-call",
                                   "uri": "https://wiki.example.com/handbook/oncall.md"}]
    AccessRule.objects.filter(tenant=people.acme, collection__name="runbooks").delete()
    hidden = next(i for i in portability.memory_export(caller=bruno) if i["kind"] == "fragment")
    assert hidden["documents"] == [{"id": "handbook/oncall.md", "title": "", "uri": ""}]


def test_only_people_export_and_only_their_own(people):
    with pytest.raises(PermissionDenied):
        list(portability.memory_export(caller=people.caller(people.triage_bot)))
    with pytest.raises(PermissionDenied):
        list(portability.memory_export(caller=people.system()))


def test_the_page_and_the_command_give_the_same_export(people, tmp_path):
    bruno = people.caller(people.bruno)
    _write(bruno, f"My favourite tea is {MARKER} oolong.")
    response = signed_in(people.bruno).get("/memory/export/")
    assert response.status_code == 200 and response["Content-Type"].startswith("application/x-ndjson")
    assert response["Content-Disposition"].startswith('attachment; filename="memoryhub-memory-')
    assert response["Cache-Control"] == "no-store"
    from_page = _items(response.content.decode().splitlines())
    path = tmp_path / "bruno.jsonl"
    call_command("memory_export", "acme", "bruno", output=str(path))
    from_command = _items(path.read_text().splitlines())
    assert [i for i in from_page if i["kind"] != "memory_export"] == \
        [i for i in from_command if i["kind"] != "memory_export"]
    assert MARKER in path.read_text()


# --------------------------------------------------------------------------- erasure


def test_only_an_admin_of_the_workspace_erases(people):
    _write(people.caller(people.bruno), f"My favourite tea is {MARKER} oolong.")
    with pytest.raises(PermissionDenied):
        portability.memory_erase(caller=people.caller(people.cleo), user_id=people.bruno.pk, confirm="bruno")
    with pytest.raises(NotFound):
        portability.memory_erase(caller=people.caller(people.olga), user_id=people.bruno.pk, confirm="bruno")
    with pytest.raises(InvalidArgument, match="Type bruno exactly"):
        portability.memory_erase(caller=people.caller(people.ada), user_id=people.bruno.pk, confirm="Bruno")
    with pytest.raises(PermissionDenied):  # the operator exports a person's memory; an admin does not
        list(portability.memory_export_for(caller=people.caller(people.ada), username="bruno"))
    assert Fragment.objects.filter(value__contains=MARKER).count() == 1
    assert signed_in(people.bruno).post(f"/workspace/members/{people.bruno.pk}/erase/",
                                        {"confirm": "bruno"}).status_code == 403
    wrong = signed_in(people.ada).post(f"/workspace/members/{people.bruno.pk}/erase/", {"confirm": "brun"})
    assert wrong.status_code == 400 and Fragment.objects.filter(value__contains=MARKER).count() == 1


def _relation_files(*, heap_only: bool = False) -> list[Path]:
    """The on-disk files of the fragment table, its TOAST table and every index of both."""
    with connection.cursor() as cursor:
        cursor.execute("SELECT current_setting('data_directory')")
        data = Path(cursor.fetchone()[0])
        cursor.execute("""
            SELECT pg_relation_filepath(c.oid) FROM pg_class AS c
             WHERE c.oid IN (SELECT 'memoryhub_fragment'::regclass
                             UNION SELECT reltoastrelid FROM pg_class WHERE oid = 'memoryhub_fragment'::regclass
                             UNION SELECT indexrelid FROM pg_index WHERE indrelid = 'memoryhub_fragment'::regclass
                             UNION SELECT indexrelid FROM pg_index WHERE indrelid = (
                                 SELECT reltoastrelid FROM pg_class WHERE oid = 'memoryhub_fragment'::regclass))
               AND pg_relation_filepath(c.oid) IS NOT NULL AND (NOT %s OR c.relkind = 'r' OR c.relkind = 't')""",
                       [heap_only])
        paths = [data / row[0] for row in cursor.fetchall()]
    files = []
    for path in paths:
        files.extend(p for p in path.parent.glob(path.name + "*") if p.name == path.name or p.name.startswith(
            path.name + "."))
    return files


def _no_older_snapshot() -> None:
    """A rewrite keeps the row versions an open snapshot of this database may
    still read (as the docs say): wait until no other session holds one, so
    what is measured is the rewrite itself."""
    query = """SELECT pid, state, left(query, 80) FROM pg_stat_activity
                WHERE datname = current_database() AND pid <> pg_backend_pid()
                  AND (backend_xmin IS NOT NULL OR backend_xid IS NOT NULL)"""
    deadline = time.monotonic() + 20
    while True:
        with connection.cursor() as cursor:
            cursor.execute(query)
            holders = cursor.fetchall()
        if not holders:
            return
        assert time.monotonic() < deadline, f"sessions still hold snapshots: {holders}"
        time.sleep(0.2)


def _statistics_hold(text: str) -> bool:
    """Whether the planner's statistics of the fragment table quote `text`."""
    with connection.cursor() as cursor:
        cursor.execute("SELECT count(*) FROM pg_stats AS s WHERE tablename = 'memoryhub_fragment' AND s::text ILIKE %s",
                       [f"%{text}%"])
        return bool(cursor.fetchone()[0])


def _tables_holding(text: str) -> list[str]:
    with connection.cursor() as cursor:
        cursor.execute("SELECT tablename FROM pg_tables WHERE schemaname = 'public'")
        tables = [row[0] for row in cursor.fetchall()]
        found = []
        for table in tables:
            cursor.execute(f'SELECT count(*) FROM "{table}" AS t WHERE t::text ILIKE %s', [f"%{text}%"])
            if cursor.fetchone()[0]:
                found.append(table)
    return found


@pytest.mark.django_db(transaction=True)
def test_an_erasure_leaves_nothing_of_the_values_and_the_chain_still_verifies(tmp_path):
    people = make_people()
    bruno = people.caller(people.bruno)
    first = _write(bruno, f"My favourite tea is {MARKER} oolong.", idempotency_key="tea-1")
    replaced = _write(bruno, f"My desk is by the {SECOND} window.")
    fragment_forget(caller=bruno, fragment_id=replaced)
    before = timezone.now()
    # (Receipts keep the reader's query: the workspace's audit record. Not the value.)
    read = fragments_search(caller=bruno, query="favourite tea oolong")
    assert [str(hit.fragment.pk) for hit in read.hits] == [first]
    receipt_chain.checkpoint_sign(caller=people.system())
    salt = Fragment.objects.get(pk=first).value_salt
    assert IdempotencyRecord.objects.filter(principal=f"user:{people.bruno.pk}").exists()
    with connection.cursor() as cursor:
        cursor.execute("ANALYZE memoryhub_fragment")
    assert _tables_holding(MARKER) == ["memoryhub_fragment"] and _statistics_hold(MARKER)

    done = portability.memory_erase(caller=people.caller(people.ada), user_id=people.bruno.pk, confirm="bruno")
    assert done.fragments == 2 and done.erasure.storage_cleaned_at is None
    # What the task queued after the commit does (and the beat repeats until none waits).
    _no_older_snapshot()
    assert portability.storage_clean_due() == 1
    assert portability.storage_clean_due() == 0
    assert Erasure.objects.get().storage_cleaned_at is not None
    with connection.cursor() as cursor:
        cursor.execute("CHECKPOINT")
    assert _tables_holding(MARKER) == [] and _tables_holding(SECOND) == []
    assert not _statistics_hold(MARKER) and not _statistics_hold(SECOND)
    # Tombstones never go back to the embedding backlog.
    assert first not in enrichment.fragments_pending(older_than=dt.timedelta(0))
    files = _relation_files()
    assert len(files) >= 4  # the table, its TOAST table and the indexes
    # No index keeps a word of them; the table's rows do not either (above), though
    # the pages' freed space may, until a storage rewrite (next test).
    indexes = [path for path in files if path not in _relation_files(heap_only=True)]
    assert len(indexes) >= 10
    for path in indexes:
        raw = path.read_bytes()
        assert MARKER.encode() not in raw and SECOND.encode() not in raw, path
    # The rows stay as tombstones nobody is served, at any instant.
    tombstone = Fragment.objects.get(pk=first)
    assert (tombstone.value, tombstone.retired_reason, tombstone.embedding) == ("", "erased", None)
    assert fragments_search(caller=bruno, query="favourite tea oolong").hits == []
    assert fragments_search(caller=bruno, query="favourite tea", as_of=before).hits == []
    assert not IdempotencyRecord.objects.filter(principal=f"user:{people.bruno.pk}").exists()
    # The receipt that served it keeps the id and the hash; the chain and its checkpoint still verify.
    receipt = Receipt.objects.get(pk=read.receipt_id)
    assert receipt.served == [first]
    assert receipt.served_hashes == [chain_format.value_hash(f"My favourite tea is {MARKER} oolong.", salt)]
    assert tombstone.value_salt == ""  # the hash can no longer confirm any guess
    replay = receipt_replay(caller=bruno, receipt_id=read.receipt_id)
    assert replay.chain.verifies and replay.missing_now == [first]
    export = tmp_path / "receipts.jsonl"
    call_command("receipts_export", "acme", output=str(export))
    erasures = [json.loads(line) for line in export.read_text().splitlines() if '"erasure"' in line]
    assert erasures[0]["subject"] == "user:bruno" and sorted(erasures[0]["fragments"]) == sorted([first, replaced])
    assert erasures[0]["erased_by"] == "user:ada"
    result = subprocess.run([sys.executable, "-I", "-S", str(ROOT / "contract" / "receipt_chain.py"), str(export),
                             "--public-key", chain_format.public_key_text(receipt_chain.public_key())],
                            capture_output=True, text=True, timeout=60)
    assert result.returncode == 0 and "INTACT" in result.stdout and "2 fragments of user:bruno were erased" in \
        result.stdout, result.stdout
    assert Erasure.objects.get().fragment_ids == [first, replaced] or \
        sorted(Erasure.objects.get().fragment_ids) == sorted([first, replaced])
    # Bruno keeps his account and can remember again; his export says what was erased.
    again = _write(bruno, "My favourite tea is now green.")
    exported = {i["id"]: i for i in portability.memory_export(caller=bruno) if i["kind"] == "fragment"}
    assert exported[first]["status"] == "erased" and exported[first]["value"] == ""
    assert exported[again]["status"] == "live"


def test_the_erase_page_and_command(people):
    _write(people.caller(people.bruno), f"My favourite tea is {MARKER} oolong.")
    client = signed_in(people.ada)
    page = client.get(f"/workspace/members/{people.bruno.pk}/erase/")
    assert page.status_code == 200 and "Type the person" in page.content.decode()
    response = client.post(f"/workspace/members/{people.bruno.pk}/erase/", {"confirm": "bruno"}, follow=True)
    assert "Erased 1 memory of bruno." in response.content.decode()
    assert not Fragment.objects.filter(value__contains=MARKER).exists()
    _write(people.caller(people.cleo), f"Cleo likes {SECOND} tea.")
    from django.core.management.base import CommandError

    with pytest.raises(CommandError, match="--yes"):
        call_command("memory_erase", "acme", "cleo")
    assert Fragment.objects.filter(value__contains=SECOND).exists()
    call_command("memory_erase", "acme", "cleo", yes=True)
    assert not Fragment.objects.filter(value__contains=SECOND).exists()


@pytest.mark.django_db(transaction=True)
def test_a_storage_rewrite_leaves_no_byte_of_them_on_disk():
    people = make_people()
    bruno = people.caller(people.bruno)
    _write(bruno, f"My favourite tea is {MARKER} oolong.")
    fragment_forget(caller=bruno, fragment_id=_write(bruno, f"My desk is by the {SECOND} window."))
    _no_older_snapshot()
    call_command("memory_erase", "acme", "bruno", yes=True, rewrite_storage=True)
    with connection.cursor() as cursor:
        cursor.execute("CHECKPOINT")
    files = _relation_files()
    assert len(files) >= 12
    for path in files:
        raw = path.read_bytes()
        assert MARKER.encode() not in raw and SECOND.encode() not in raw, path


def _another_session(*, dbname: str | None = None) -> psycopg.Connection:
    """A session of its own (autocommit), as this test's connection logs in:
    to this database, or to `dbname` of the same cluster."""
    connection.ensure_connection()
    info = connection.connection.info
    return psycopg.connect(**{**info.get_parameters(), "password": info.password, "dbname": dbname or info.dbname},
                           autocommit=True)


@pytest.mark.django_db(transaction=True)
@pytest.mark.parametrize("holder", ["a transaction older than the erasure", "another cleaning run",
                                    "a write in another database"])
def test_an_asked_for_rewrite_waits_for_what_holds_it_back_and_is_never_skipped_in_silence(holder, monkeypatch):
    """The erasure's own cleaning (sent off at its commit), an older transaction
    or a write begun before it in another database of the cluster can hold the
    rewrite back: it waits for them, and past its bound it fails saying so
    (the erasure itself is done), where it used to return as if done."""
    from django.core.management.base import CommandError

    people = make_people()
    bruno = people.caller(people.bruno)
    _write(bruno, f"My favourite tea is {MARKER} oolong.")
    other = _another_session(dbname="postgres" if holder == "a write in another database" else None)
    try:
        if holder == "another cleaning run":
            other.execute("SELECT pg_advisory_lock(%s)", [portability._CLEANING_LOCK])
        else:
            other.execute("BEGIN ISOLATION LEVEL REPEATABLE READ")
            other.execute("SELECT txid_current()" if holder == "a write in another database"
                          else "SELECT count(*) FROM memoryhub_fragment")
        monkeypatch.setattr(portability, "REWRITE_WAIT_SECONDS", 0)
        with pytest.raises(CommandError, match="Erased 1 memories of bruno, but the storage was not rewritten: "
                                               + ("another cleaning run" if holder == "another cleaning run"
                                                  else "a transaction older than the erasure, open since")):
            call_command("memory_erase", "acme", "bruno", yes=True, rewrite_storage=True)
        assert not Fragment.objects.filter(value__contains=MARKER).exists()  # erased all the same
        assert Erasure.objects.get().storage_cleaned_at is None

        # Held back for a while: it waits, and rewrites once the holder is gone.
        _write(bruno, f"My desk is by the {SECOND} window.")
        monkeypatch.setattr(portability, "REWRITE_WAIT_SECONDS", 60)
        pauses: list[bool] = []

        def holder_ends(seconds: float) -> None:
            if not pauses:
                other.execute("SELECT pg_advisory_unlock_all()" if holder == "another cleaning run" else "ROLLBACK")
            else:
                time.sleep(0.05)  # something else holds it back for a moment (another test's transaction)
            pauses.append(True)

        monkeypatch.setattr(portability, "_pause", holder_ends)
        call_command("memory_erase", "acme", "bruno", yes=True, rewrite_storage=True)
        assert pauses
    finally:
        other.close()
    assert not Erasure.objects.filter(storage_cleaned_at__isnull=True).exists()
    with connection.cursor() as cursor:
        cursor.execute("CHECKPOINT")
    for path in _relation_files():
        raw = path.read_bytes()
        assert MARKER.encode() not in raw and SECOND.encode() not in raw, path


@pytest.mark.django_db(transaction=True)
def test_a_rewrite_never_holds_memory_up_behind_a_session_that_holds_the_table(monkeypatch):
    """A session idle in a transaction that read the fragments (begun after the
    erasure, so it holds no row back) keeps the table's lock. VACUUM FULL used
    to wait for it as long as it lasted, every read and write of memory queued
    behind; it now gives up after its lock wait while that session still holds
    the table, pauses longer, and rewrites once the session is gone. The
    connection's lock_timeout is what it was."""

    people = make_people()
    bruno = people.caller(people.bruno)
    _write(bruno, f"My favourite tea is {MARKER} oolong.")
    call_command("memory_erase", "acme", "bruno", yes=True)
    other = _another_session()
    outcome: list[BaseException | None] = []
    lock_timeouts: list[str] = []
    pauses: list[float] = []
    held_when_given_up: list[bool] = []

    def pause(seconds: float) -> None:
        pauses.append(seconds)
        if seconds == portability._TABLE_RETRY_SECONDS and not held_when_given_up:
            held_when_given_up.append(other.info.transaction_status == psycopg.pq.TransactionStatus.INTRANS)
            other.execute("ROLLBACK")
        else:
            time.sleep(0.05)  # something else holds it back for a moment (another test's transaction)

    def shown_lock_timeout() -> None:
        with connection.cursor() as cursor:
            cursor.execute("SHOW lock_timeout")
            lock_timeouts.append(cursor.fetchone()[0])

    def rewrite() -> None:
        try:
            shown_lock_timeout()
            call_command("memory_erase", "acme", "bruno", yes=True, rewrite_storage=True)
            shown_lock_timeout()
            outcome.append(None)
        except BaseException as exc:  # noqa: BLE001 - handed to the test's thread
            outcome.append(exc)
        finally:
            connections.close_all()

    monkeypatch.setattr(portability, "REWRITE_LOCK_WAIT_MS", 200)
    monkeypatch.setattr(portability, "_pause", pause)
    worker = threading.Thread(target=rewrite)
    try:
        other.execute("BEGIN")
        other.execute("SELECT count(*) FROM memoryhub_fragment")
        worker.start()
        worker.join(timeout=60)
        assert not worker.is_alive(), "the rewrite still waits for the session's lock"
    finally:
        other.close()
        if worker.ident is not None:  # started
            worker.join(timeout=60)
    assert outcome == [None], outcome
    assert held_when_given_up == [True]
    assert len(lock_timeouts) == 2 and lock_timeouts[0] == lock_timeouts[1]
    assert Erasure.objects.get().storage_cleaned_at is not None
    with connection.cursor() as cursor:
        cursor.execute("CHECKPOINT")
    for path in _relation_files():
        assert MARKER.encode() not in path.read_bytes(), path


# What keeps old row versions from VACUUM, and how pg_stat_activity shows it
# (backend_xmin, backend_xid): a snapshot; or a transaction id without one, as
# a transaction that wrote holds while it sits idle between statements.
OLDER_TRANSACTIONS = {
    "a snapshot": (("BEGIN ISOLATION LEVEL REPEATABLE READ", "SELECT count(*) FROM memoryhub_fragment"),
                   (True, False)),
    "a writer holding no snapshot": (("BEGIN", "SELECT txid_current()"), (False, True)),
}


@pytest.mark.django_db(transaction=True)
@pytest.mark.parametrize("older", OLDER_TRANSACTIONS)
def test_an_erasure_waits_for_an_older_transaction_before_it_is_clean(older):
    """A session that began before the erasure may still need the old row
    versions, and VACUUM keeps them: the cleaning does not call the erasure
    clean until that session is gone, whether it holds a snapshot or only a
    transaction id."""
    from django.db import connections

    statements, shown = OLDER_TRANSACTIONS[older]
    people = make_people()
    _write(people.caller(people.bruno), f"My favourite tea is {MARKER} oolong.")
    other = connections.create_connection("default")
    try:
        with other.cursor() as cursor:
            cursor.execute("SELECT pg_backend_pid()")
            pid = cursor.fetchone()[0]
            for statement in statements:
                cursor.execute(statement)
        with connection.cursor() as cursor:
            cursor.execute("SELECT backend_xmin IS NOT NULL, backend_xid IS NOT NULL FROM pg_stat_activity "
                           "WHERE pid = %s", [pid])
            assert cursor.fetchone() == shown
        portability.memory_erase(caller=people.caller(people.ada), user_id=people.bruno.pk, confirm="bruno")
        assert portability.storage_clean_due() == 0
        assert Erasure.objects.get().storage_cleaned_at is None
    finally:
        other.close()
    _no_older_snapshot()
    assert portability.storage_clean_due() == 1


def test_the_operator_exports_a_person_who_has_left(people, tmp_path):
    _write(people.caller(people.bruno), f"My favourite tea is {MARKER} oolong.")
    people.bruno.is_active = False
    people.bruno.save(update_fields=["is_active"])
    path = tmp_path / "bruno.jsonl"
    call_command("memory_export", "acme", "bruno", output=str(path))
    assert MARKER in path.read_text() and oct(path.stat().st_mode & 0o777) == "0o600"
    assert not Path(f"{path}.partial").exists()
