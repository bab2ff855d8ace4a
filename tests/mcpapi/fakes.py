"""In-memory stand-ins for the two interfaces mcpapi is built against.

Tokens are self-describing (base64url JSON) so a server in another process
verifies the same tokens as the tests mint.
"""

from __future__ import annotations

import asyncio
import base64
import json
import time
import uuid
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any

from contract.limits import FRAGMENT_VALUE_MAX_BYTES, RESULT_MAX_BYTES
from mcpapi.budget import clip_utf8, tool_result_size
from mcpapi.client import MEMORY_SCOPES, MemoryServiceError, Principal

TOKEN_PREFIX = "fake."
SLOW_QUERY = "__slow__"
FAILING_QUERY = "__explode__"
MALFORMED_QUERY = "__malformed__"
# Values over 4 KiB, more than 128 KiB in all: the service clips and fits them.
HUGE_QUERY = "__huge__"
# The same from a service that did not fit them to the result budget: mcpapi refuses it.
OVERSIZE_QUERY = "__oversize__"


def mint_token(
    *,
    resource: str | list[str],
    kind: str = "user",
    scopes: tuple[str, ...] = MEMORY_SCOPES,
    tenant: str = "tenant-a",
    subject: str | None = None,
    expires_in: float = 900,
) -> str:
    claims = {
        "tenant": tenant,
        "subject": subject or f"{kind}-{uuid.uuid4().hex[:12]}",
        "kind": kind,
        "scopes": list(scopes),
        "aud": [resource] if isinstance(resource, str) else resource,
        "exp": time.time() + expires_in,
        "client_id": "test-client",
    }
    return TOKEN_PREFIX + base64.urlsafe_b64encode(
        json.dumps(claims).encode()
    ).decode().rstrip("=")


def token_claims(token: str) -> dict[str, Any]:
    """The claims of a token `mint_token` made; ValueError for anything else."""
    if not token.startswith(TOKEN_PREFIX):
        raise ValueError("not a fake token")
    payload = token[len(TOKEN_PREFIX) :]
    claims: dict[str, Any] = json.loads(base64.urlsafe_b64decode(payload + "=" * (-len(payload) % 4)))
    return claims


class FakeVerifier:
    async def verify(self, token: str, *, resource: str) -> Principal | None:
        try:
            claims = token_claims(token)
        except ValueError:
            return None
        if claims["exp"] < time.time() or resource not in claims["aud"]:
            return None
        return Principal(
            tenant=claims["tenant"],
            subject=claims["subject"],
            kind=claims["kind"],
            scopes=frozenset(claims["scopes"]),
            client_id=claims["client_id"],
            resource=resource,
            credential=token,
        )


@dataclass
class MemoryStore:
    """State shared by every client the factory hands out."""

    fragments: list[dict[str, Any]] = field(default_factory=list)
    receipts: dict[str, dict[str, Any]] = field(default_factory=dict)
    calls: list[tuple[str, Principal, Any]] = field(default_factory=list)
    read_timeouts: list[float] = field(default_factory=list)

    def factory(self, *, read_timeout: float) -> FakeMemoryClient:
        self.read_timeouts.append(read_timeout)
        return FakeMemoryClient(self)


def _owner(principal: Principal) -> tuple[str, str, str]:
    return (principal.tenant, principal.kind, principal.subject)


def _iso(instant: datetime) -> str:
    """An instant as the memory service renders one (memoryhub.mcp_adapter.render.iso)."""
    return instant.astimezone(UTC).isoformat().replace("+00:00", "Z")


def _fitted(answer: dict[str, Any], stored: list[dict[str, Any]]) -> dict[str, Any]:
    """What the memory service does before it records a read: every value clipped to 4 KiB,
    then trailing fragments dropped until the whole tool result fits 128 KiB."""
    fragments = [_shown(fragment) for fragment in stored]
    while fragments and tool_result_size({**answer, "fragments": fragments}) > RESULT_MAX_BYTES:
        fragments.pop()
    return {**answer, "fragments": fragments, "truncated": len(fragments) < len(stored)}


def _shown(fragment: dict[str, Any]) -> dict[str, Any]:
    value = clip_utf8(fragment["value"], FRAGMENT_VALUE_MAX_BYTES)
    shown = {key: item for key, item in fragment.items() if key != "owner"}
    return {**shown, "value": value, "value_truncated": value != fragment["value"]}


class FakeMemoryClient:
    """Answers as memoryhub's in-process client does (memoryhub.mcp_adapter.render): the same
    keys, a search already fitted to the result budget, its receipt listing what it served."""

    def __init__(self, store: MemoryStore) -> None:
        self.store = store

    async def search(
        self, principal: Principal, arguments: dict[str, Any]
    ) -> dict[str, Any]:
        self.store.calls.append(("search", principal, arguments))
        query = arguments["query"]
        if query == SLOW_QUERY:
            await asyncio.sleep(60)
        if query == FAILING_QUERY:
            raise RuntimeError("secret internals that must not reach the wire")
        if query == MALFORMED_QUERY:
            return {"fragments": "not a list"}
        if query in (HUGE_QUERY, OVERSIZE_QUERY):
            size = FRAGMENT_VALUE_MAX_BYTES if query == OVERSIZE_QUERY else 6000
            matches = [self._fragment(f"huge-{i}", "x" * size) for i in range(arguments["limit"])]
        else:
            matches = [
                fragment
                for fragment in self.store.fragments
                if fragment["owner"] == _owner(principal)
                and query.lower() in fragment["value"].lower()
            ][: arguments["limit"]]
        receipt_id = f"rcpt_{uuid.uuid4().hex[:24]}"
        as_of = arguments.get("as_of") or datetime.now(UTC)
        answer = {
            "fragments": [],
            "receipt_id": receipt_id,
            "as_of": _iso(as_of),
            "abstained": False,
            "abstain_reason": None,
            "truncated": False,
            "notice": None if matches else "Nothing in the memory visible to you matched this query.",
        }
        if query == OVERSIZE_QUERY:
            # A memory service that forgot the budget: clipped values, every fragment kept.
            answer = {**answer, "fragments": [_shown(fragment) for fragment in matches]}
        else:
            answer = _fitted(answer, matches)
        self.store.receipts[receipt_id] = {
            "owner": _owner(principal),
            "query": query,
            "served": [fragment["id"] for fragment in answer["fragments"]],
            "as_of": answer["as_of"],
            "as_of_explicit": arguments.get("as_of") is not None,
            "seq": len(self.store.receipts) + 1,
        }
        return answer

    def _fragment(
        self, fragment_id: str, value: str, owner: tuple[str, str, str] | None = None
    ) -> dict[str, Any]:
        return {
            "id": fragment_id,
            "value": value,
            "confidence": 0.9,
            "grounding_status": "grounded",
            "created_at": _iso(datetime.now(UTC)),
            "agents": [],
            "resources": [],
            "score": 1.0,
            "owner": owner,
        }

    async def write(
        self, principal: Principal, arguments: dict[str, Any]
    ) -> dict[str, Any]:
        self.store.calls.append(("write", principal, arguments))
        content = arguments["content"]
        if "password=" in content:
            return {
                "outcome": "Dropped 1 (privacy_drop).",
                "results": [_write_result("dropped", reason="privacy_drop",
                                          explanation="The content carries a password.")],
                "review_state": None,
                "dropped": 1,
                "drop_reasons": ["privacy_drop"],
            }
        if principal.kind == "agent":
            proposal_id = str(uuid.uuid4())
            return {
                "outcome": (
                    f"Parked as proposal {proposal_id} for a workspace admin's review; nothing becomes memory "
                    "until a person approves it."
                ),
                "results": [_write_result("proposed")],
                "review_state": "pending",
                "dropped": 0,
                "drop_reasons": [],
                "proposal_id": proposal_id,
            }
        fragment_id = str(uuid.uuid4())
        self.store.fragments.append(
            self._fragment(fragment_id, content, _owner(principal))
        )
        return {
            "outcome": "Stored 1 new fact.",
            "results": [_write_result("stored", fragment_id=fragment_id)],
            "review_state": None,
            "dropped": 0,
            "drop_reasons": [],
        }

    async def receipt(self, principal: Principal, receipt_id: str) -> dict[str, Any]:
        self.store.calls.append(("receipt", principal, receipt_id))
        receipt = self.store.receipts.get(receipt_id)
        if receipt is None or receipt["owner"] != _owner(principal):
            raise MemoryServiceError(
                "not_found",
                "No receipt with this id is yours to replay; you can reopen only receipts of your own reads.",
            )
        explicit = receipt["as_of_explicit"]
        return {
            "receipt_id": receipt_id,
            "query": receipt["query"],
            "as_of": receipt["as_of"],
            "agents": [],
            "roles": ["member"],
            "reader": principal.subject.split(":", 1)[-1],
            "served_then": receipt["served"],
            "served_now": receipt["served"],
            "missing_now": [],
            "extra_now": [],
            "replayed": True,
            "replayed_as_of": receipt["as_of"] if explicit else _iso(datetime.now(UTC)),
            "note": None if explicit else "The original read had no as_of; it was replayed as of now.",
            "grounding_changes": [],
            "chain": {"seq": receipt["seq"], "hash": "0" * 64, "verified": True, "checkpoint_signed_at": None,
                      "note": f"Chain entry {receipt['seq']} verifies against what it records and its neighbours."},
        }

    async def probe(self, principal: Principal) -> str:
        return "ready"


def _write_result(
    operation: str, *, fragment_id: str | None = None, reason: str | None = None, explanation: str | None = None
) -> dict[str, Any]:
    return {
        "operation": operation,
        "fragment_id": fragment_id,
        "superseded_fragment_id": None,
        "reason": reason,
        "explanation": explanation,
    }


async def not_found_app(scope: dict[str, Any], receive: Any, send: Any) -> None:
    """Stands in for Django: answers every other path."""
    assert scope["type"] == "http"
    body = json.dumps({"fallback": scope["path"]}).encode()
    await send(
        {
            "type": "http.response.start",
            "status": 404,
            "headers": [(b"content-type", b"application/json")],
        }
    )
    await send({"type": "http.response.body", "body": body})
