"""The serving-receipt chain: its format, and a verifier that trusts nothing but
this file, Python's standard library and the workspace's published public key.

Every serving receipt of a workspace is one entry of a hash chain:

    content = sha256(canonical(record))               hex
    hash    = sha256("<prev>:<seq>:<content>")         hex, ASCII
    prev    = the previous entry's hash (GENESIS for seq 1)

`record` is what the receipt records (reader, principal kind, client, the
request's hash, as_of, role audience, each served fragment id with the hash of
its value, the time); `canonical` is JSON with sorted keys, no spaces and
ASCII escapes, so the bytes are the same in every language. The request and
value hashes are HMACs keyed by salts the verifier does not need (version 2,
`request_hash`, `value_hash`): the chain commits to them without letting an
export confirm a guess of anyone's query or memory. A checkpoint signs a
chain head with the deployment's Ed25519 key:

    message = "memoryhub receipt checkpoint v1\\n<workspace>\\n<seq>\\n<head>\\n<signed_at>"

An export (`manage.py receipts_export`) is JSON Lines: one `export` header,
then `receipt` entries in chain order, the `checkpoint`s and the `erasure`s
(a person's memory destroyed on request: the receipts keep the ids and value
hashes they recorded, so erasing changes nothing in the chain). Verify one with

    python3 contract/receipt_chain.py EXPORT.jsonl --public-key ed25519:<hex> [--checkpoints PUBLISHED.jsonl]

It names the first broken link: an entry whose content or place changed after
it was written, a missing entry, entries out of order, a checkpoint whose head
is not the chain's or whose signature does not verify. Exit status 0 = intact,
1 = broken, 2 = the file or the key could not be read.

Imports only the standard library (a test holds it to that), so it can be
copied out of the repository and run anywhere.
"""

from __future__ import annotations

import argparse
import hashlib
import hmac
import json
import sys
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any

FORMAT = "memoryhub-receipts/1"
GENESIS = "0" * 64
CHECKPOINT_PREFIX = "memoryhub receipt checkpoint v1"
PUBLIC_KEY_PREFIX = "ed25519:"


# --------------------------------------------------------------------------- the chain's hashes


def canonical(record: dict[str, Any]) -> bytes:
    return json.dumps(record, sort_keys=True, separators=(",", ":"), ensure_ascii=True,
                      allow_nan=False).encode("ascii")


def content_hash(record: dict[str, Any]) -> str:
    return hashlib.sha256(canonical(record)).hexdigest()


def link_hash(prev: str, seq: int, content: str) -> str:
    # (UTF-8, not ASCII: the same bytes for every valid entry, and no crash on a hostile one.)
    return hashlib.sha256(f"{prev}:{seq}:{content}".encode()).hexdigest()


def value_hash(value: str, salt: str = "") -> str:
    """The hash a receipt keeps of a served fragment's stored value: HMAC-SHA256
    keyed by the fragment's own salt (record version 2), so it confirms no
    guess of the value to anyone without the salt, and confirms nothing at all
    once an erasure has wiped it; plain SHA-256 in version 1 records."""
    if not salt:
        return hashlib.sha256(value.encode("utf-8")).hexdigest()
    return hmac.new(salt.encode("ascii"), value.encode("utf-8"), hashlib.sha256).hexdigest()


def request_hash(request: dict[str, Any], salt: str = "") -> str:
    """The hash a record keeps of the read's request (query and filters): HMAC
    keyed by the receipt's salt, which only the reader is shown (version 2);
    plain SHA-256 of its canonical JSON in version 1 records."""
    if not salt:
        return content_hash(request)
    return hmac.new(salt.encode("ascii"), canonical(request), hashlib.sha256).hexdigest()


def checkpoint_message(workspace: str, seq: int, head: str, signed_at: str) -> bytes:
    return f"{CHECKPOINT_PREFIX}\n{workspace}\n{seq}\n{head}\n{signed_at}".encode()


def key_id(public_key: bytes) -> str:
    return hashlib.sha256(public_key).hexdigest()[:16]


def public_key_text(public_key: bytes) -> str:
    return PUBLIC_KEY_PREFIX + public_key.hex()


def public_key_from_text(text: str) -> bytes:
    text = text.strip()
    if text.startswith(PUBLIC_KEY_PREFIX):
        text = text[len(PUBLIC_KEY_PREFIX):]
    key = bytes.fromhex(text)
    if len(key) != 32:
        raise ValueError("an Ed25519 public key is 32 bytes (64 hex digits)")
    return key


# --------------------------------------------------------------------------- Ed25519 (RFC 8032), verification only

_P = 2**255 - 19
_L = 2**252 + 27742317777372353535851937790883648493
_D = -121665 * pow(121666, _P - 2, _P) % _P
_SQRT_M1 = pow(2, (_P - 1) // 4, _P)
_Point = tuple[int, int, int, int]


def _recover_x(y: int, sign: int) -> int | None:
    if y >= _P:
        return None
    x2 = (y * y - 1) * pow(_D * y * y + 1, _P - 2, _P) % _P
    if x2 == 0:
        return None if sign else 0
    x = pow(x2, (_P + 3) // 8, _P)
    if (x * x - x2) % _P != 0:
        x = x * _SQRT_M1 % _P
    if (x * x - x2) % _P != 0:
        return None
    if (x & 1) != sign:
        x = _P - x
    return x


def _add(a: _Point, b: _Point) -> _Point:
    pa = (a[1] - a[0]) * (b[1] - b[0]) % _P
    pb = (a[1] + a[0]) * (b[1] + b[0]) % _P
    pc = 2 * a[3] * b[3] * _D % _P
    pd = 2 * a[2] * b[2] % _P
    e, f, g, h = pb - pa, pd - pc, pd + pc, pb + pa
    return (e * f % _P, g * h % _P, f * g % _P, e * h % _P)


def _multiply(scalar: int, point: _Point) -> _Point:
    result: _Point = (0, 1, 1, 0)
    while scalar > 0:
        if scalar & 1:
            result = _add(result, point)
        point = _add(point, point)
        scalar >>= 1
    return result


def _same(a: _Point, b: _Point) -> bool:
    return (a[0] * b[2] - b[0] * a[2]) % _P == 0 and (a[1] * b[2] - b[1] * a[2]) % _P == 0


def _decompress(data: bytes) -> _Point | None:
    if len(data) != 32:
        return None
    y = int.from_bytes(data, "little")
    sign = y >> 255
    y &= (1 << 255) - 1
    x = _recover_x(y, sign)
    return None if x is None else (x, y, 1, x * y % _P)


_BASE_Y = 4 * pow(5, _P - 2, _P) % _P
_BASE_X = _recover_x(_BASE_Y, 0) or 0
_BASE: _Point = (_BASE_X, _BASE_Y, 1, _BASE_X * _BASE_Y % _P)


def ed25519_verify(public_key: bytes, message: bytes, signature: bytes) -> bool:
    if len(public_key) != 32 or len(signature) != 64:
        return False
    a = _decompress(public_key)
    r = _decompress(signature[:32])
    if a is None or r is None:
        return False
    s = int.from_bytes(signature[32:], "little")
    if s >= _L:
        return False
    h = int.from_bytes(hashlib.sha512(signature[:32] + public_key + message).digest(), "little") % _L
    return _same(_multiply(s, _BASE), _add(r, _multiply(h, a)))


# --------------------------------------------------------------------------- verifying an export


@dataclass
class Verdict:
    receipts: int = 0
    first_seq: int | None = None
    last_seq: int | None = None
    checkpoints: int = 0
    last_signed_seq: int = 0
    signatures_checked: bool = False
    problem: str | None = None
    notes: list[str] = field(default_factory=list)

    @property
    def intact(self) -> bool:
        return self.problem is None

    def summary(self) -> str:
        if self.problem:
            return f"BROKEN: {self.problem}"
        span = f"{self.receipts} receipts, seq {self.first_seq} to {self.last_seq}" if self.receipts else "no receipts"
        signed = "signatures verified" if self.signatures_checked else "signatures NOT checked (no public key given)"
        lines = [f"INTACT: {span}; {self.checkpoints} checkpoints match the chain, {signed}."]
        if not self.checkpoints:
            lines.append("warning: no checkpoint matched: whoever holds the database could have rewritten the whole "
                         "chain; compare with published checkpoints (--checkpoints).")
        elif self.last_seq is not None and self.last_signed_seq < self.last_seq:
            lines.append(f"note: entries {self.last_signed_seq + 1} to {self.last_seq} are covered by no checkpoint "
                         "yet.")
        return "\n".join(lines + self.notes)


class _Broken(Exception):
    pass


def _entry_name(entry: dict[str, Any]) -> str:
    record = entry.get("record")
    record = record if isinstance(record, dict) else {}
    return f"seq {entry.get('seq')} (receipt {record.get('receipt', '?')})"


def verify_export(lines: Iterable[str], public_keys: Iterable[bytes] = (),
                  published: Iterable[str] = ()) -> Verdict:
    """Verify an export; `public_keys` check the checkpoints' signatures (each
    by its key id), `published` are checkpoint lines kept outside the server,
    which the chain must contain too."""
    keys = {key_id(key): key for key in public_keys}
    verdict = Verdict(signatures_checked=bool(keys))
    try:
        _verify(lines, keys, list(published), verdict)
    except _Broken as exc:
        verdict.problem = str(exc)
    return verdict


def _parsed(lines: Iterable[str], what: str = "line") -> Iterable[tuple[int, dict[str, Any]]]:
    for number, line in enumerate(lines, start=1):
        if not line.strip():
            continue
        try:
            item = json.loads(line)
        except ValueError as exc:
            raise _Broken(f"{what} {number} is not JSON ({exc})") from None
        if not isinstance(item, dict) or not isinstance(item.get("kind"), str):
            raise _Broken(f"{what} {number} is not an export item")
        yield number, item


def _verify(lines: Iterable[str], keys: dict[str, bytes], published: list[str], verdict: Verdict) -> None:
    items = iter(_parsed(lines))
    first = next(items, None)
    if first is None or first[1]["kind"] != "export" or first[1].get("format") != FORMAT:
        raise _Broken(f"the file does not start with a {FORMAT} export header")
    header = first[1]
    workspace, since = header.get("workspace"), header.get("since")
    expected_first = 1 if since is None else header.get("first_seq")
    chain: dict[int, str] = {}
    checkpoints: list[tuple[str, dict[str, Any]]] = []
    previous: dict[str, Any] | None = None
    for number, item in items:
        if item["kind"] == "checkpoint":
            checkpoints.append((f"line {number}", item))
            continue
        if item["kind"] == "erasure":
            _note_erasure(number, item, workspace, verdict)
            continue
        if item["kind"] != "receipt":
            raise _Broken(f"line {number}: unknown item kind {item['kind']!r}")
        _check_entry(number, item, previous, workspace, expected_first)
        chain[item["seq"]] = item["hash"]
        verdict.receipts += 1
        verdict.first_seq = item["seq"] if verdict.first_seq is None else verdict.first_seq
        verdict.last_seq = item["seq"]
        previous = item
    seen = {(item.get("seq"), item.get("head"), item.get("signature")) for _, item in checkpoints}
    for number, item in _parsed(published, "published line"):
        # A published log may hold other workspaces' lines too, and lines this export already has.
        if item["kind"] == "checkpoint" and item.get("workspace") == workspace \
                and (item.get("seq"), item.get("head"), item.get("signature")) not in seen:
            checkpoints.append((f"published line {number}", item))
    # Where the chain is known to end: its last entry, or just before where a --since export starts.
    end = max(verdict.last_seq or 0, (header.get("first_seq") or 1) - 1 if since is not None else 0)
    for where, checkpoint in checkpoints:
        _check_checkpoint(where, checkpoint, workspace, chain, since, verdict, keys, end=end,
                          exported_at=header.get("exported_at"))
    if since is not None and verdict.first_seq is not None:
        verdict.notes.append(f"note: the export starts at seq {verdict.first_seq} (since {since}); entries before it "
                             "were not checked.")


def _note_erasure(number: int, item: dict[str, Any], workspace: Any, verdict: Verdict) -> None:
    if item.get("workspace") != workspace:
        raise _Broken(f"line {number}: an erasure of another workspace")
    erased = item.get("fragments")
    erased = erased if isinstance(erased, list) else []
    verdict.notes.append(f"note: {len(erased)} fragments of {item.get('subject')} were erased at "
                         f"{item.get('erased_at')} by {item.get('erased_by')}; the receipts that served "
                         "them keep their ids and value hashes.")


def _check_entry(number: int, item: dict[str, Any], previous: dict[str, Any] | None, workspace: Any,
                 expected_first: Any) -> None:
    seq, prev, stored, record = item.get("seq"), item.get("prev"), item.get("hash"), item.get("record")
    if not isinstance(seq, int) or not isinstance(prev, str) or not isinstance(stored, str) \
            or not isinstance(record, dict):
        raise _Broken(f"line {number}: a receipt entry needs seq, prev, hash and record")
    name = _entry_name(item)
    if record.get("workspace") != workspace:
        raise _Broken(f"{name}: it belongs to another workspace")
    if previous is None:
        if seq != expected_first:
            raise _Broken(f"{name} is the first entry of the export, which should start at seq {expected_first}: "
                          f"the entries before it are missing")
        if seq == 1 and prev != GENESIS:
            raise _Broken(f"{name}: the first entry of the chain does not start from the genesis hash")
    else:
        if seq <= previous["seq"]:
            raise _Broken(f"{name} comes after seq {previous['seq']}: entries are out of order")
        if seq != previous["seq"] + 1:
            missing = f"seq {previous['seq'] + 1}" + (f" to {seq - 1}" if seq - 1 > previous["seq"] + 1 else "")
            raise _Broken(f"{name} follows seq {previous['seq']}: the entry at {missing} is missing here "
                          "(removed, or moved out of its place)")
        if prev != previous["hash"]:
            raise _Broken(f"{name} does not link to the entry before it ({_entry_name(previous)}): "
                          "an entry was removed, replaced or moved")
    try:
        recomputed = link_hash(prev, seq, content_hash(record))
    except (TypeError, ValueError) as exc:
        raise _Broken(f"{name}: its record cannot be encoded ({exc})") from None
    if recomputed != stored:
        raise _Broken(f"{name}: its content or its place in the chain changed after it was written "
                      "(its hash does not match)")


def _check_checkpoint(where: str, checkpoint: dict[str, Any], workspace: Any, chain: dict[int, str],
                      since: Any, verdict: Verdict, keys: dict[str, bytes], *, end: int, exported_at: Any) -> None:
    seq, head, signed_at = checkpoint.get("seq"), checkpoint.get("head"), checkpoint.get("signed_at")
    if not isinstance(seq, int) or not isinstance(head, str) or not isinstance(signed_at, str):
        raise _Broken(f"{where}: a checkpoint needs seq, head and signed_at")
    name = f"the checkpoint of seq {seq} signed at {signed_at}"
    if checkpoint.get("workspace") != workspace:
        raise _Broken(f"{name} belongs to another workspace")
    if keys:
        key = keys.get(str(checkpoint.get("key_id", "")))
        if key is None:
            raise _Broken(f"{name} was signed with key {checkpoint.get('key_id')}, not one of the public keys given")
        try:
            signature = bytes.fromhex(str(checkpoint.get("signature", "")))
        except ValueError:
            signature = b""
        if not ed25519_verify(key, checkpoint_message(workspace, seq, head, signed_at), signature):
            raise _Broken(f"{name}: its signature does not verify with this public key")
    if seq > end:
        if isinstance(exported_at, str) and signed_at > exported_at:
            verdict.notes.append(f"note: {name} was signed after this export was made and was not compared.")
            return
        raise _Broken(f"{name}: the chain ends at seq {end}, before the signed head: "
                      f"entries {end + 1} to {seq} are missing")
    if seq in chain:
        if chain[seq] != head:
            raise _Broken(f"{name}: the chain's entry at seq {seq} is not the one that was signed")
        verdict.checkpoints += 1
        verdict.last_signed_seq = max(verdict.last_signed_seq, seq)
    elif since is None:
        raise _Broken(f"{name}: the chain has no entry at seq {seq}")
    else:
        verdict.notes.append(f"note: {name} is before the first exported entry and was not compared.")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description="Verify a memoryhub receipts export offline.")
    parser.add_argument("export", help="the JSON Lines file written by manage.py receipts_export ('-' = stdin)")
    parser.add_argument("--public-key", action="append", default=[],
                        help="the deployment's checkpoint key, ed25519:<64 hex digits>, as published (repeat it for "
                             "keys used before; without one, signatures are not checked)")
    parser.add_argument("--checkpoints", default="",
                        help="checkpoint lines published outside the server (JSON Lines): the chain must hold them")
    args = parser.parse_args(argv)
    try:
        keys = [public_key_from_text(text) for text in args.public_key]
    except ValueError as exc:
        print(f"error: --public-key: {exc}", file=sys.stderr)
        return 2
    try:
        published: list[str] = []
        if args.checkpoints:
            with open(args.checkpoints, encoding="utf-8") as handle:
                published = handle.read().splitlines()
        if args.export == "-":
            verdict = verify_export(sys.stdin, keys, published)
        else:
            with open(args.export, encoding="utf-8") as handle:
                verdict = verify_export(handle, keys, published)
    except (OSError, UnicodeDecodeError) as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    print(verdict.summary())
    return 0 if verdict.intact else 1


if __name__ == "__main__":
    sys.exit(main())
