"""Tamper-evident serving receipts: each workspace's receipts form one hash
chain, and checkpoints sign its head with the deployment's Ed25519 key.

The format (what a receipt's hash covers, how entries link, what a checkpoint
signs) and the offline verifier are in `contract/receipt_chain.py`, which needs
only the standard library. This module appends to the chain in one
statement after the search's read, checks one entry for a replay, signs checkpoints and
writes exports.

A receipt's record commits to the request by its SHA-256, not its text: an
admin's export proves the chain without showing anyone's queries, and the
reader, who sees their own query on the receipt, can check it against the hash.

Appending is one statement (`APPEND`): it advances the workspace's chain head
row and returns the new entry's place, so concurrent searches of a workspace
take their places in the order they commit and none can skip or share one.
"""

from __future__ import annotations

import datetime as dt
import os
import tempfile
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from itertools import zip_longest
from pathlib import Path
from typing import Any

from cryptography.exceptions import InvalidSignature
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey, Ed25519PublicKey
from django.conf import settings
from django.db import connection, transaction
from django.db.models.expressions import DatabaseDefault
from django.utils import timezone

from contract.receipt_chain import (
    FORMAT,
    GENESIS,
    checkpoint_message,
    content_hash,
    key_id,
    link_hash,
    public_key_text,
    request_hash,
)
from memoryhub import access
from memoryhub.access import Caller
from memoryhub.database import prepared, replicas
from memoryhub.errors import Conflict
from memoryhub.models import Erasure, Receipt, ReceiptChain, ReceiptCheckpoint, Tenant

CHECKPOINT_TASK = "memoryhub.tasks.checkpoint_receipts"

# One statement: the workspace's head row (ReceiptChain) advances by one entry.
# (Each parameter is cast where it is used, so a prepared statement, which
# gives a parameter one type, reads it as text in all of them.)
APPEND = """
INSERT INTO memoryhub_receiptchain AS head (tenant_id, seq, prev, head)
VALUES (%(tenant)s, 1, %(genesis)s::text,
        encode(sha256(convert_to(%(genesis)s::text || ':1:' || %(content)s::text, 'UTF8')), 'hex'))
ON CONFLICT (tenant_id) DO UPDATE SET
    seq = head.seq + 1,
    prev = head.head,
    head = encode(sha256(convert_to(head.head || ':' || (head.seq + 1)::text || ':' || %(content)s::text, 'UTF8')),
                  'hex')
RETURNING seq, prev, head
"""


def instant(value: dt.datetime) -> str:
    return value.astimezone(dt.UTC).strftime("%Y-%m-%dT%H:%M:%S.%fZ")


def record_of(receipt: Receipt) -> dict[str, Any]:
    """What a receipt's chain entry covers, from its stored fields (the same
    function writes the entry, checks it on replay and exports it), in the
    format version the receipt was chained with: 1, the request by its plain
    SHA-256; 2, by its HMAC under the receipt's own salt."""
    # (Migration 0008 chained the receipts made before the chain, as version 1, before the field existed.)
    version = getattr(receipt, "record_version", 1)
    request = receipt.request or {}
    return {
        "v": version,
        "receipt": receipt.pk,
        "workspace": str(receipt.tenant_id),
        "reader": {"kind": receipt.principal_kind, "subject": receipt.subject, "user": receipt.reader_user_id,
                   "agent": receipt.reader_agent_id},
        "client_id": receipt.client_id,
        **({"request_sha256": content_hash(request)} if version == 1
           else {"request_hmac": request_hash(request, receipt.request_salt)}),
        "roles": list(receipt.roles or []),
        "as_of": instant(receipt.as_of),
        "as_of_explicit": receipt.as_of_explicit,
        "served": [[pk, value] for pk, value in zip_longest(receipt.served or [], receipt.served_hashes or [])],
        "abstained": receipt.abstained,
        "budget": receipt.budget,
        "created_at": instant(receipt.created_at),
    }


_CHAIN_FIELDS = ("chain_seq", "chain_prev", "chain_hash")


def receipt_append(receipt: Receipt) -> Receipt:
    """Give `receipt` the next place in its workspace's chain and insert it,
    in one statement (`APPEND` and the insert that takes its place from it),
    so both happen or neither does. The chain head stays locked until the
    statement's transaction commits: its own (a search on its own), or the
    caller's. The statement's text is the same for every receipt, so it runs
    prepared on its connection (memoryhub.database), not planned at each run
    (psycopg prepares it once for each set of parameter types: a person's or
    an agent's receipt, say)."""
    # Every other column as Model.save() would write it.
    stored = [field for field in Receipt._meta.concrete_fields if field.attname not in _CHAIN_FIELDS]
    given = {f"v{number}": field.pre_save(receipt, True) for number, field in enumerate(stored)}
    # A value left to the database's own default is written as DEFAULT, as save() writes it.
    values = {name: field.get_db_prep_save(value, connection)
              for (name, value), field in zip(given.items(), stored, strict=True)
              if not isinstance(value, DatabaseDefault)}
    quote = connection.ops.quote_name
    columns = ", ".join([*(quote(str(field.column)) for field in stored),
                         *(quote(name) for name in _CHAIN_FIELDS)])
    placed = ", ".join([*(f"%({name})s" if name in values else "DEFAULT" for name in given),
                        "(SELECT seq FROM link)", "(SELECT prev FROM link)", "(SELECT head FROM link)"])
    # No read shows a receipt: it does not hold the read pool back (memoryhub.database.replicas).
    with prepared(connection.alias), replicas.unseen_by_reads(), connection.cursor() as cursor:
        cursor.execute(
            f"WITH link AS ({APPEND}) INSERT INTO {quote(Receipt._meta.db_table)} ({columns}) "  # noqa: S608 - our model's names
            f"VALUES ({placed}) RETURNING {', '.join(_CHAIN_FIELDS)}",
            {"tenant": receipt.tenant_id, "genesis": GENESIS, "content": content_hash(record_of(receipt)), **values},
        )
        receipt.chain_seq, receipt.chain_prev, receipt.chain_hash = cursor.fetchone()
    receipt._state.adding, receipt._state.db = False, connection.alias
    return receipt


# --------------------------------------------------------------------------- one entry, for a replay


@dataclass(frozen=True)
class EntryCheck:
    seq: int
    hash: str
    verifies: bool
    note: str
    checkpoint: ReceiptCheckpoint | None = None


def entry_check(receipt: Receipt) -> EntryCheck:
    """Whether a receipt's entry still matches what it records and links to
    its neighbours, and the first checkpoint at or after it whose signature
    verifies and whose signed head is the chain's entry at its place. (That
    the entries between are intact, an export's verification shows.)"""
    seq, stored = receipt.chain_seq, receipt.chain_hash
    # The head first: an entry after this one that it counts committed with it,
    # so the neighbours read next (a newer snapshot) include it.
    head_seq = ReceiptChain.objects.filter(tenant_id=receipt.tenant_id).values_list("seq", flat=True).first() or 0
    problem = None
    if link_hash(receipt.chain_prev, seq, content_hash(record_of(receipt))) != stored:
        problem = "what this receipt records changed after it was written"
    else:
        neighbours = {place: (prev, hash_) for place, prev, hash_ in Receipt.objects.filter(
            tenant_id=receipt.tenant_id, chain_seq__in=[seq - 1, seq + 1]).values_list(
            "chain_seq", "chain_prev", "chain_hash")}
        before = GENESIS if seq == 1 else neighbours.get(seq - 1, (None, None))[1]
        if before != receipt.chain_prev:
            problem = "the entry before it is missing or was changed"
        elif seq + 1 in neighbours:
            if neighbours[seq + 1][0] != stored:
                problem = "the entry after it does not link to it"
        elif head_seq > seq:
            problem = "the entry after it is missing"
    checkpoint, checkpoint_problem, checked = _covering_checkpoint(receipt)
    problem = problem or checkpoint_problem
    if problem:
        return EntryCheck(seq, stored, False, f"Chain entry {seq} does not verify: {problem}.", checkpoint)
    signed = (" No checkpoint has signed it yet." if checkpoint is None else
              f" The checkpoint signed at {instant(checkpoint.signed_at)} (entry {checkpoint.seq}) "
              + ("verifies and matches the chain." if checked else
                 f"matches the chain; it was signed with key {checkpoint.key_id}, which the offline verifier "
                 "checks."))
    return EntryCheck(seq, stored, True, f"Chain entry {seq} verifies against what it records and its neighbours."
                      + signed, checkpoint)


def _covering_checkpoint(receipt: Receipt) -> tuple[ReceiptCheckpoint | None, str | None, bool]:
    """The first checkpoint at or after the receipt, what is wrong with it
    (None: nothing), and whether its signature was checked: with this
    deployment's public key, when it was signed with that key; one signed with
    an earlier key is left to the offline verifier, which takes every key published."""
    checkpoint = (ReceiptCheckpoint.objects.filter(tenant_id=receipt.tenant_id, seq__gte=receipt.chain_seq)
                  .order_by("seq").first())
    if checkpoint is None:
        return None, None, False
    current = _public_key_or_none()
    checked = current is not None and checkpoint.key_id == key_id(current)
    if current is not None and checked:
        message = checkpoint_message(str(receipt.tenant_id), checkpoint.seq, checkpoint.head,
                                     instant(checkpoint.signed_at))
        try:
            Ed25519PublicKey.from_public_bytes(current).verify(bytes.fromhex(checkpoint.signature), message)
        except (InvalidSignature, ValueError):
            return (checkpoint, f"the checkpoint of entry {checkpoint.seq} does not verify with this deployment's "
                    "key", True)
    signed_entry = Receipt.objects.filter(tenant_id=receipt.tenant_id, chain_seq=checkpoint.seq).values_list(
        "chain_hash", flat=True).first()
    if signed_entry != checkpoint.head:
        return checkpoint, f"the chain's entry {checkpoint.seq} is not the one its checkpoint signed", checked
    return checkpoint, None, checked


def _public_key_or_none() -> bytes | None:
    try:
        return public_key()
    except Conflict:
        return None


# --------------------------------------------------------------------------- the signing key


def _key_path() -> Path:
    configured = getattr(settings, "MEMORYHUB_RECEIPT_KEY_FILE", "")
    return Path(configured) if configured else Path(settings.DATA_DIR) / "receipt-signing-key.pem"


KEY_MISSING = ("The receipt checkpoint key is missing from {path} while checkpoints signed with it exist. "
               "Restore the key file from your backup (or point MEMORYHUB_RECEIPT_KEY_FILE at it); until then no "
               "checkpoint can be signed or checked.")


def signing_key() -> Ed25519PrivateKey:
    """The deployment's checkpoint key, made on first use (mode 0600), written
    whole before it appears (two processes racing end up with the same one).
    Never made again once checkpoints exist: a new key would silently stop
    matching the public key already published."""
    path = _key_path()
    if not path.exists():
        if ReceiptCheckpoint.objects.exists():
            raise Conflict(KEY_MISSING.format(path=path))
        path.parent.mkdir(parents=True, exist_ok=True)
        pem = Ed25519PrivateKey.generate().private_bytes(
            serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, serialization.NoEncryption())
        descriptor, partial = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.")  # mode 0600
        with os.fdopen(descriptor, "wb") as handle:
            handle.write(pem)
            handle.flush()
            os.fsync(handle.fileno())
        try:
            os.link(partial, path)  # fails if another process made it first: theirs is kept
        except FileExistsError:
            pass
        finally:
            os.unlink(partial)
    key = serialization.load_pem_private_key(path.read_bytes(), password=None)
    if not isinstance(key, Ed25519PrivateKey):
        raise RuntimeError(f"{path} does not hold an Ed25519 private key")
    return key


def public_key() -> bytes:
    return signing_key().public_key().public_bytes(serialization.Encoding.Raw, serialization.PublicFormat.Raw)


# --------------------------------------------------------------------------- checkpoints


def _sign(tenant: Tenant) -> ReceiptCheckpoint | None:
    with transaction.atomic():
        head = ReceiptChain.objects.select_for_update().filter(tenant=tenant).first()
        latest = ReceiptCheckpoint.objects.filter(tenant=tenant).order_by("-seq").first()
        if head is None or (latest is not None and latest.seq >= head.seq):
            return None
        key = signing_key()
        signed_at = timezone.now()
        message = checkpoint_message(str(tenant.pk), head.seq, head.head, instant(signed_at))
        return ReceiptCheckpoint.objects.create(
            tenant=tenant, seq=head.seq, head=head.head, signed_at=signed_at, key_id=key_id(public_key()),
            signature=key.sign(message).hex(),
        )


def checkpoint_sign(*, caller: Caller) -> ReceiptCheckpoint | None:
    """Sign the caller's workspace's chain head now (None when no receipt was
    added since the last checkpoint)."""
    return _sign(access.require_receipt_auditor(caller))


def checkpoints_due() -> int:
    """The periodic checkpoint (settings.CELERY_BEAT_SCHEDULE): every workspace
    whose chain moved since its last checkpoint."""
    signed = 0
    for tenant in Tenant.objects.filter(receipt_chain__isnull=False):
        signed += _sign(access.require_system(access.system_caller(tenant=tenant))) is not None
    return signed


@dataclass(frozen=True)
class ChainOverview:
    public_key: str
    key_id: str
    head_seq: int
    head: str
    checkpoints: list[ReceiptCheckpoint]
    erasures: list[Erasure]


def chain_overview(*, caller: Caller, limit: int = 20) -> ChainOverview:
    """The admin page: the public key to publish, the head, the latest checkpoints and erasures."""
    tenant = access.require_receipt_auditor(caller)
    head = ReceiptChain.objects.filter(tenant=tenant).first()
    key = public_key()
    return ChainOverview(
        public_key=public_key_text(key), key_id=key_id(key), head_seq=head.seq if head else 0,
        head=head.head if head else GENESIS,
        checkpoints=list(ReceiptCheckpoint.objects.filter(tenant=tenant).order_by("-seq")[:limit]),
        erasures=list(Erasure.objects.filter(tenant=tenant).order_by("-erased_at")[:limit]),
    )


def checkpoint_item(checkpoint: ReceiptCheckpoint) -> dict[str, Any]:
    return {"kind": "checkpoint", "workspace": str(checkpoint.tenant_id), "seq": checkpoint.seq,
            "head": checkpoint.head, "signed_at": instant(checkpoint.signed_at), "key_id": checkpoint.key_id,
            "signature": checkpoint.signature}


# --------------------------------------------------------------------------- exports


@contextmanager
def export_snapshot() -> Iterator[None]:
    """One read-only snapshot for a whole export (its own transaction when it
    is the outermost; inside a caller's, that transaction's)."""
    outermost = not connection.in_atomic_block
    with transaction.atomic():
        if outermost:
            with connection.cursor() as cursor:
                cursor.execute("SET TRANSACTION ISOLATION LEVEL REPEATABLE READ READ ONLY")
        yield


def receipts_export(*, caller: Caller, since: dt.datetime | None = None) -> Iterator[dict[str, Any]]:
    """The workspace's chain as export items (contract/receipt_chain.py): the
    header, every entry from the first made at or after `since` in chain
    order, then the checkpoints from there on. Read in one snapshot."""
    tenant = access.require_receipt_auditor(caller)
    receipts = Receipt.objects.filter(tenant=tenant).order_by("chain_seq")
    checkpoints = ReceiptCheckpoint.objects.filter(tenant=tenant).order_by("seq")
    with export_snapshot():
        first_seq = 1
        if since is not None:
            first = receipts.filter(created_at__gte=since).values_list("chain_seq", flat=True).first()
            first_seq = first if first is not None else (ReceiptChain.objects.filter(tenant=tenant)
                                                         .values_list("seq", flat=True).first() or 0) + 1
        yield {"kind": "export", "format": FORMAT, "workspace": str(tenant.pk), "workspace_slug": tenant.slug,
               "exported_at": instant(timezone.now()), "since": instant(since) if since else None,
               "first_seq": first_seq,
               # The key to check with, when this deployment still has it (publish it anyway).
               "public_key": public_key_text(key) if (key := _public_key_or_none()) else None}
        for receipt in receipts.filter(chain_seq__gte=first_seq).iterator(chunk_size=500):
            yield {"kind": "receipt", "seq": receipt.chain_seq, "prev": receipt.chain_prev,
                   "hash": receipt.chain_hash, "record": record_of(receipt)}
        for checkpoint in checkpoints.filter(seq__gte=first_seq).iterator(chunk_size=500):
            yield checkpoint_item(checkpoint)
        # Erasures (memoryhub.services.portability): the fragments whose values are gone; the
        # receipts that served them keep their ids and value hashes, so the chain is unchanged.
        for erasure in Erasure.objects.filter(tenant=tenant).order_by("erased_at"):
            yield {"kind": "erasure", "workspace": str(tenant.pk), "subject": erasure.subject,
                   "erased_by": erasure.erased_by, "erased_at": instant(erasure.erased_at),
                   "fragments": list(erasure.fragment_ids)}
