"""Tamper-evident receipts: every serving receipt joins its workspace's hash
chain, checkpoints sign the head, an export verifies offline with nothing but
the standard library, and a changed, removed or moved receipt is named."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import threading
from pathlib import Path

import pytest
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey
from django.core.management import call_command
from django.db import IntegrityError, connection, connections
from django.test.utils import CaptureQueriesContext

from contract import receipt_chain as chain_format
from memoryhub.errors import PermissionDenied
from memoryhub.mcp_adapter.render import receipt_output
from memoryhub.models import Fragment, Receipt, ReceiptChain, ReceiptCheckpoint
from memoryhub.services import receipt_chain, search
from memoryhub.services.receipts import receipt_replay
from memoryhub.services.search import fragments_search
from tests.conftest import make_people

ROOT = Path(__file__).resolve().parents[2]
VERIFIER = ROOT / "contract" / "receipt_chain.py"


@pytest.fixture
def bruno(people):
    return people.caller(people.bruno)


def _searches(caller, count: int, query: str = "TLS certificates") -> list[str]:
    return [fragments_search(caller=caller, query=f"{query} {n}").receipt_id for n in range(count)]


def _export(people, tmp_path: Path, *, since: str = "") -> Path:
    path = tmp_path / "receipts.jsonl"
    call_command("receipts_export", people.acme.slug, output=str(path), **({"since": since} if since else {}))
    return path


def _verify(path: Path, *, key: str | None = None) -> subprocess.CompletedProcess:
    """The verifier as an auditor runs it: a bare interpreter (-I -S: no
    site-packages, no environment), the file on its own."""
    key = chain_format.public_key_text(receipt_chain.public_key()) if key is None else key
    command = [sys.executable, "-I", "-S", str(VERIFIER), str(path), *(["--public-key", key] if key else [])]
    return subprocess.run(command, capture_output=True, text=True, timeout=60, cwd="/",
                          env={"PATH": os.environ["PATH"]})


# --------------------------------------------------------------------------- the chain


def test_each_receipt_takes_the_next_place_and_links_to_the_one_before(people, bruno, shared_fragment):
    shared_fragment("Rotate the TLS certificates every quarter.")
    ids = _searches(bruno, 3) + _searches(people.caller(people.carol), 1)
    receipts = [Receipt.objects.get(pk=pk) for pk in ids]
    assert [r.chain_seq for r in receipts] == [1, 2, 3, 4]
    assert receipts[0].chain_prev == chain_format.GENESIS
    for before, after in zip(receipts, receipts[1:], strict=False):
        assert after.chain_prev == before.chain_hash
    for receipt in receipts:  # the hash PostgreSQL computed is the one the format defines
        record = receipt_chain.record_of(receipt)
        assert receipt.chain_hash == chain_format.link_hash(receipt.chain_prev, receipt.chain_seq,
                                                            chain_format.content_hash(record))
    head = ReceiptChain.objects.get(tenant=people.acme)
    assert (head.seq, head.head, head.prev) == (4, receipts[-1].chain_hash, receipts[-2].chain_hash)
    # What it covers: reader, kind, client, the request (by hash), as_of, roles, what was served and each value.
    record = receipt_chain.record_of(receipts[0])
    assert record["v"] == 2
    assert record["reader"] == {"kind": "user", "subject": "user:bruno", "user": people.bruno.pk, "agent": None}
    # The request and the values by keyed hashes: nobody without the salts can confirm a guess.
    assert record["request_hmac"] == chain_format.request_hash(receipts[0].request, receipts[0].request_salt)
    assert record["request_hmac"] != chain_format.content_hash(receipts[0].request)
    assert record["roles"] == ["engineering"] and record["client_id"] == "test-client"
    served = receipts[0].served
    salt = Fragment.objects.get(pk=served[0]).value_salt
    assert served and len(salt) >= 32 and record["served"] == [[served[0], chain_format.value_hash(
        "Rotate the TLS certificates every quarter.", salt)]]
    assert record["served"][0][1] != chain_format.value_hash("Rotate the TLS certificates every quarter.")


def test_each_workspace_has_its_own_chain(people, bruno):
    _searches(bruno, 2)
    olga = people.caller(people.olga)
    other = Receipt.objects.get(pk=_searches(olga, 1)[0])
    assert other.tenant == people.globex and other.chain_seq == 1 and other.chain_prev == chain_format.GENESIS


def test_joining_the_chain_and_storing_the_receipt_cost_one_statement(bruno, shared_fragment):
    shared_fragment("Rotate the TLS certificates every quarter.")
    _searches(bruno, 1)
    with CaptureQueriesContext(connection) as captured:
        _searches(bruno, 1)
    chain_statements = [q["sql"] for q in captured.captured_queries if "memoryhub_receiptchain" in q["sql"]]
    receipt_statements = [q["sql"] for q in captured.captured_queries if "memoryhub_receipt\"" in q["sql"]
                          or "memoryhub_receipt " in q["sql"]]
    assert len(chain_statements) == 1 and chain_statements[0].lstrip().startswith("WITH link AS (")
    assert receipt_statements == chain_statements and 'INSERT INTO "memoryhub_receipt"' in chain_statements[0]


def test_a_failed_receipt_leaves_the_chain_as_it_was(bruno, monkeypatch):
    _searches(bruno, 1)
    before = ReceiptChain.objects.get(tenant=bruno.tenant).seq

    # The receipt cannot be stored (its id is taken): the chain's head does not move either.
    taken = Receipt.objects.filter(tenant=bruno.tenant).values_list("pk", flat=True).first()
    monkeypatch.setattr(search, "new_receipt_id", lambda: taken)
    with pytest.raises(IntegrityError):
        fragments_search(caller=bruno, query="anything")
    monkeypatch.undo()
    assert ReceiptChain.objects.get(tenant=bruno.tenant).seq == before
    assert Receipt.objects.get(pk=_searches(bruno, 1)[0]).chain_seq == before + 1


@pytest.mark.django_db(transaction=True)
def test_parallel_searches_keep_one_unbroken_chain(tmp_path):
    people = make_people()
    callers = [people.caller(who) for who in (people.ada, people.bruno, people.cleo, people.carol)]
    per_thread, threads_count = 6, 8
    barrier = threading.Barrier(threads_count)
    failures: list[BaseException] = []

    def run(n: int) -> None:
        try:
            barrier.wait()
            _searches(callers[n % len(callers)], per_thread, query=f"thread {n}")
        except BaseException as exc:  # noqa: BLE001 - reported below
            failures.append(exc)
        finally:
            connections.close_all()

    threads = [threading.Thread(target=run, args=(n,)) for n in range(threads_count)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(120)
    assert not failures, failures
    total = per_thread * threads_count
    assert sorted(Receipt.objects.filter(tenant=people.acme).values_list("chain_seq", flat=True)) == \
        list(range(1, total + 1))
    receipt_chain.checkpoint_sign(caller=people.system())
    result = _verify(_export(people, tmp_path))
    assert result.returncode == 0, result.stdout + result.stderr
    assert f"INTACT: {total} receipts, seq 1 to {total}; 1 checkpoints match the chain, signatures verified" \
        in result.stdout


# --------------------------------------------------------------------------- exports, checkpoints and the verifier


def test_an_export_verifies_offline_with_the_published_key(people, bruno, tmp_path):
    _searches(bruno, 3)
    first = receipt_chain.checkpoint_sign(caller=people.system())
    assert first is not None and first.seq == 3
    assert receipt_chain.checkpoint_sign(caller=people.system()) is None  # nothing new to sign
    _searches(bruno, 2)
    path = _export(people, tmp_path)
    lines = [json.loads(line) for line in path.read_text().splitlines()]
    assert lines[0]["kind"] == "export" and lines[0]["format"] == chain_format.FORMAT
    assert lines[0]["public_key"] == chain_format.public_key_text(receipt_chain.public_key())
    assert [item["seq"] for item in lines if item["kind"] == "receipt"] == [1, 2, 3, 4, 5]
    # A query is in the export only as its hash.
    assert "TLS certificates" not in path.read_text()
    result = _verify(path)
    assert result.returncode == 0 and "INTACT: 5 receipts, seq 1 to 5; 1 checkpoints" in result.stdout
    unsigned = _verify(path, key="")
    assert unsigned.returncode == 0 and "signatures NOT checked" in unsigned.stdout
    someone_else = Ed25519PrivateKey.generate().public_key().public_bytes_raw()
    forged = _verify(path, key=chain_format.public_key_text(someone_else))
    assert forged.returncode == 1 and "not one of the public keys given" in forged.stdout
    # A checkpoint line whose signature was altered.
    lines = path.read_text().splitlines()
    index = next(i for i, line in enumerate(lines) if '"checkpoint"' in line)
    item = json.loads(lines[index])
    item["signature"] = ("0" if item["signature"][0] != "0" else "1") + item["signature"][1:]
    lines[index] = json.dumps(item)
    path.write_text("\n".join(lines) + "\n")
    altered = _verify(path)
    assert altered.returncode == 1 and "its signature does not verify" in altered.stdout


def test_an_export_from_a_date_starts_mid_chain_and_still_verifies(people, bruno, tmp_path):
    ids = _searches(bruno, 4)
    later = Receipt.objects.get(pk=ids[2])
    path = _export(people, tmp_path, since=later.created_at.isoformat())
    seqs = [json.loads(line).get("seq") for line in path.read_text().splitlines()[1:]]
    assert seqs == [3, 4]
    result = _verify(path)
    assert result.returncode == 0 and "seq 3 to 4" in result.stdout


def _tampered(people, tmp_path, *statements: tuple[str, list]) -> str:
    with connection.cursor() as cursor:
        for sql, params in statements:
            cursor.execute(sql, params)
    result = _verify(_export(people, tmp_path))
    assert result.returncode == 1, result.stdout
    return result.stdout


def test_a_value_changed_with_sql_is_caught_and_named(people, bruno, tmp_path):
    ids = _searches(bruno, 5)
    out = _tampered(people, tmp_path, (
        "UPDATE memoryhub_receipt SET request = jsonb_set(request, '{query}', '\"innocent\"') WHERE id = %s",
        [ids[2]]))
    assert f"seq 3 (receipt {ids[2]})" in out and "changed after it was written" in out


def test_a_served_value_hash_changed_with_sql_is_caught(people, bruno, shared_fragment, tmp_path):
    shared_fragment("Rotate the TLS certificates every quarter.")
    ids = _searches(bruno, 2)
    forged = json.dumps(["0" * 64])
    out = _tampered(people, tmp_path, (f"UPDATE memoryhub_receipt SET served_hashes = '{forged}'::jsonb WHERE id = %s",
                                       [ids[0]]))
    assert f"seq 1 (receipt {ids[0]})" in out


def test_a_deleted_receipt_is_caught_and_named(people, bruno, tmp_path):
    ids = _searches(bruno, 5)
    out = _tampered(people, tmp_path, ("DELETE FROM memoryhub_receipt WHERE id = %s", [ids[2]]))
    assert f"seq 4 (receipt {ids[3]}) follows seq 2: the entry at seq 3 is missing" in out


def test_two_reordered_receipts_are_caught_and_named(people, bruno, tmp_path):
    ids = _searches(bruno, 5)
    out = _tampered(people, tmp_path,  # seq 2 and 3 swap places
                    ("UPDATE memoryhub_receipt SET chain_seq = -1 WHERE id = %s", [ids[1]]),
                    ("UPDATE memoryhub_receipt SET chain_seq = 2 WHERE id = %s", [ids[2]]),
                    ("UPDATE memoryhub_receipt SET chain_seq = 3 WHERE id = %s", [ids[1]]))
    assert f"seq 2 (receipt {ids[2]}) does not link to the entry before it" in out


def test_the_newest_receipts_removed_are_caught_by_the_signed_head(people, bruno, tmp_path):
    ids = _searches(bruno, 4)
    receipt_chain.checkpoint_sign(caller=people.system())
    out = _tampered(people, tmp_path, ("DELETE FROM memoryhub_receipt WHERE id IN (%s, %s)", [ids[2], ids[3]]))
    assert "the chain ends at seq 2, before the signed head: entries 3 to 4 are missing" in out


def test_a_rewritten_chain_does_not_match_its_signed_checkpoint(people, bruno, tmp_path):
    """Whoever can write the database can recompute every hash after a change;
    the checkpoint, signed with a key they do not hold, still catches it."""
    ids = _searches(bruno, 3)
    receipt_chain.checkpoint_sign(caller=people.system())
    with connection.cursor() as cursor:
        cursor.execute("DELETE FROM memoryhub_receipt WHERE id = %s", [ids[1]])
    head = chain_format.GENESIS
    for seq, receipt in enumerate(Receipt.objects.filter(tenant=people.acme).order_by("chain_seq"), start=1):
        receipt.chain_seq, receipt.chain_prev = seq, head
        head = receipt.chain_hash = chain_format.link_hash(head, seq, chain_format.content_hash(
            receipt_chain.record_of(receipt)))
        receipt.save(update_fields=["chain_seq", "chain_prev", "chain_hash"])
    result = _verify(_export(people, tmp_path))
    assert result.returncode == 1
    assert "the chain ends at seq 2, before the signed head: entries 3 to 3 are missing" in result.stdout


def test_a_chain_rewritten_with_its_checkpoints_is_caught_by_the_published_ones(people, bruno, tmp_path):
    """Whoever can write the database can also delete the checkpoint rows: the
    lines published elsewhere still catch the rewrite, and an export with no
    checkpoint says it proves nothing against that."""
    ids = _searches(bruno, 3)
    published = tmp_path / "published.jsonl"
    published.write_text(json.dumps(receipt_chain.checkpoint_item(
        receipt_chain.checkpoint_sign(caller=people.system()))) + "\n")
    with connection.cursor() as cursor:
        cursor.execute("DELETE FROM memoryhub_receiptcheckpoint")
        cursor.execute("UPDATE memoryhub_receipt SET roles = '[\"leads\"]'::jsonb WHERE id = %s", [ids[2]])
    forged = Receipt.objects.get(pk=ids[2])
    forged.chain_hash = chain_format.link_hash(forged.chain_prev, 3, chain_format.content_hash(
        receipt_chain.record_of(forged)))
    forged.save(update_fields=["chain_hash"])
    path = _export(people, tmp_path)
    alone = _verify(path)
    assert alone.returncode == 0 and "warning: no checkpoint matched" in alone.stdout
    key = chain_format.public_key_text(receipt_chain.public_key())
    result = subprocess.run([sys.executable, "-I", "-S", str(VERIFIER), str(path), "--public-key", key,
                             "--checkpoints", str(published)], capture_output=True, text=True, timeout=60)
    assert result.returncode == 1
    assert "the chain's entry at seq 3 is not the one that was signed" in result.stdout


def test_missing_first_entries_or_an_emptied_chain_are_caught(people, bruno, tmp_path):
    ids = _searches(bruno, 3)
    receipt_chain.checkpoint_sign(caller=people.system())
    out = _tampered(people, tmp_path, ("DELETE FROM memoryhub_receipt WHERE id = %s", [ids[0]]))
    assert f"seq 2 (receipt {ids[1]}) is the first entry of the export, which should start at seq 1" in out
    out = _tampered(people, tmp_path, ("DELETE FROM memoryhub_receipt", []))
    assert "the chain ends at seq 0, before the signed head: entries 1 to 3 are missing" in out


def test_a_reordered_or_edited_export_file_is_caught(people, bruno, tmp_path):
    _searches(bruno, 4)
    path = _export(people, tmp_path)
    lines = path.read_text().splitlines()
    lines[2], lines[3] = lines[3], lines[2]
    path.write_text("\n".join(lines) + "\n")
    result = _verify(path)
    assert result.returncode == 1 and "seq 3 (receipt" in result.stdout and "follows seq 1" in result.stdout
    broken = tmp_path / "broken.jsonl"
    broken.write_text("not json\n")
    assert _verify(broken).returncode == 1
    assert _verify(tmp_path / "absent.jsonl").returncode == 2
    assert _verify(path, key="ed25519:abcd").returncode == 2


def test_the_verifier_needs_only_the_standard_library():
    import ast

    tree = ast.parse(VERIFIER.read_text())
    imported = {alias.name.split(".")[0] for node in ast.walk(tree) if isinstance(node, ast.Import)
                for alias in node.names}
    imported |= {node.module.split(".")[0] for node in ast.walk(tree)
                 if isinstance(node, ast.ImportFrom) and node.module}
    assert imported <= set(sys.stdlib_module_names) | {"__future__"}, imported


def test_the_pure_python_ed25519_agrees_with_the_library():
    key = Ed25519PrivateKey.generate()
    public = key.public_key().public_bytes_raw()
    for message in (b"", b"memoryhub", os.urandom(300)):
        signature = key.sign(message)
        assert chain_format.ed25519_verify(public, message, signature)
        assert not chain_format.ed25519_verify(public, message + b"!", signature)
        assert not chain_format.ed25519_verify(public, message, bytes([signature[0] ^ 1]) + signature[1:])
    assert not chain_format.ed25519_verify(public, b"x", b"\x00" * 64)
    assert not chain_format.ed25519_verify(b"\xff" * 32, b"x", key.sign(b"x"))


def test_the_periodic_checkpoint_signs_only_moved_chains(people, bruno):
    _searches(bruno, 2)
    assert receipt_chain.checkpoints_due() == 1
    assert receipt_chain.checkpoints_due() == 0
    _searches(people.caller(people.olga), 1)
    assert receipt_chain.checkpoints_due() == 1
    checkpoint = ReceiptCheckpoint.objects.get(tenant=people.globex)
    message = chain_format.checkpoint_message(str(people.globex.pk), 1, checkpoint.head,
                                              receipt_chain.instant(checkpoint.signed_at))
    assert chain_format.ed25519_verify(receipt_chain.public_key(), message, bytes.fromhex(checkpoint.signature))


def test_only_admins_sign_export_or_see_the_chain(people, bruno):
    for operation in (lambda c: receipt_chain.checkpoint_sign(caller=c),
                      lambda c: list(receipt_chain.receipts_export(caller=c)),
                      lambda c: receipt_chain.chain_overview(caller=c)):
        with pytest.raises(PermissionDenied):
            operation(bruno)
    assert receipt_chain.chain_overview(caller=people.caller(people.ada)).public_key.startswith("ed25519:")


# --------------------------------------------------------------------------- replays


def test_a_replay_says_whether_its_chain_entry_verifies(people, bruno):
    ids = _searches(bruno, 3)
    replay = receipt_output(receipt_replay(caller=bruno, receipt_id=ids[1]))
    assert replay["chain"]["seq"] == 2 and replay["chain"]["verified"] is True
    assert replay["chain"]["checkpoint_signed_at"] is None and "No checkpoint" in replay["chain"]["note"]
    receipt_chain.checkpoint_sign(caller=people.system())
    covered = receipt_output(receipt_replay(caller=bruno, receipt_id=ids[1]))["chain"]
    assert covered["checkpoint_signed_at"] and "verifies and matches the chain" in covered["note"]
    with connection.cursor() as cursor:  # a forged checkpoint row is not taken for a signature
        cursor.execute("UPDATE memoryhub_receiptcheckpoint SET signature = repeat('0', 128)")
    forged = receipt_output(receipt_replay(caller=bruno, receipt_id=ids[1]))["chain"]
    assert forged["verified"] is False and "does not verify with this deployment's key" in forged["note"]
    with connection.cursor() as cursor:
        cursor.execute("DELETE FROM memoryhub_receiptcheckpoint")
    with connection.cursor() as cursor:
        cursor.execute("UPDATE memoryhub_receipt SET roles = '[\"leads\"]'::jsonb WHERE id = %s", [ids[1]])
    changed = receipt_output(receipt_replay(caller=bruno, receipt_id=ids[1]))["chain"]
    assert changed["verified"] is False and "changed after it was written" in changed["note"]
    with connection.cursor() as cursor:
        cursor.execute("DELETE FROM memoryhub_receipt WHERE id = %s", [ids[1]])
    for neighbour, problem in ((ids[0], "the entry after it"), (ids[2], "the entry before it")):
        check = receipt_output(receipt_replay(caller=bruno, receipt_id=neighbour))["chain"]
        assert check["verified"] is False and problem in check["note"], check


def test_receipts_from_before_the_chain_join_it_in_the_order_they_were_made(people, bruno, shared_fragment,
                                                                           tmp_path):
    """Migration 0008 chains the receipts that existed before it."""
    import importlib

    from django.apps import apps

    migration = importlib.import_module("memoryhub.migrations.0008_receipt_chain")
    shared_fragment("Rotate the TLS certificates every quarter.")
    ids = _searches(bruno, 3)
    ReceiptChain.objects.all().delete()
    Receipt.objects.update(served_hashes=[], chain_prev="", chain_hash="")
    for n, pk in enumerate(ids):
        Receipt.objects.filter(pk=pk).update(chain_seq=-100 - n)
    migration.chain_existing_receipts(apps, None)
    assert [Receipt.objects.get(pk=pk).chain_seq for pk in ids] == [1, 2, 3]
    assert Receipt.objects.get(pk=ids[0]).served_hashes == [
        chain_format.value_hash("Rotate the TLS certificates every quarter.")]
    assert ReceiptChain.objects.get(tenant=people.acme).head == Receipt.objects.get(pk=ids[2]).chain_hash
    result = _verify(_export(people, tmp_path))
    assert result.returncode == 0 and "INTACT: 3 receipts" in result.stdout


def test_published_checkpoints_newer_than_an_export_or_before_a_since_export_are_no_break(people, bruno, tmp_path):
    ids = _searches(bruno, 3)
    first = receipt_chain.checkpoint_sign(caller=people.system())
    path = _export(people, tmp_path)
    _searches(bruno, 2)
    later = receipt_chain.checkpoint_sign(caller=people.system())
    published = tmp_path / "published.jsonl"
    published.write_text("".join(json.dumps(receipt_chain.checkpoint_item(c)) + "\n" for c in (first, later)))
    key = chain_format.public_key_text(receipt_chain.public_key())
    run = [sys.executable, "-I", "-S", str(VERIFIER)]
    result = subprocess.run([*run, str(path), "--public-key", key, "--checkpoints", str(published)],
                            capture_output=True, text=True, timeout=60)
    assert result.returncode == 0 and "signed after this export was made" in result.stdout, result.stdout
    assert "1 checkpoints match" in result.stdout  # the export's own line and the published one are one
    # A --since export with nothing new yet, beside the published log.
    since = tmp_path / "since.jsonl"
    call_command("receipts_export", "acme", output=str(since), since="2999-01-01")
    result = subprocess.run([*run, str(since), "--public-key", key, "--checkpoints", str(published)],
                            capture_output=True, text=True, timeout=60)
    assert result.returncode == 0 and "INTACT: no receipts" in result.stdout, result.stdout
    assert Receipt.objects.get(pk=ids[0]).chain_seq == 1
