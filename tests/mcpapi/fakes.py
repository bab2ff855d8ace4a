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

from mcpapi.client import MEMORY_SCOPES, MemoryServiceError, Principal

TOKEN_PREFIX = "fake."
SLOW_QUERY = "__slow__"
FAILING_QUERY = "__explode__"
MALFORMED_QUERY = "__malformed__"
HUGE_QUERY = "__huge__"


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


def _now() -> str:
    return datetime.now(UTC).isoformat()


class FakeMemoryClient:
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
        if query == HUGE_QUERY:
            fragments = [
                self._fragment(f"huge-{i}", "x" * 6000)
                for i in range(arguments["limit"])
            ]
        else:
            fragments = [
                fragment
                for fragment in self.store.fragments
                if fragment["owner"] == _owner(principal)
                and query.lower() in fragment["value"].lower()
            ][: arguments["limit"]]
        receipt_id = f"rcpt-{uuid.uuid4().hex[:12]}"
        served = [f["id"] for f in fragments]
        as_of = arguments.get("as_of") or datetime.now(UTC)
        self.store.receipts[receipt_id] = {
            "owner": _owner(principal),
            "query": query,
            "served": served,
            "as_of": as_of,
        }
        return {
            "fragments": [
                {k: v for k, v in f.items() if k != "owner"} for f in fragments
            ],
            "receipt_id": receipt_id,
            "as_of": as_of,
            "abstained": False,
            "truncated": False,
            "notice": None if fragments else "Nothing matched.",
        }

    def _fragment(
        self, fragment_id: str, value: str, owner: tuple[str, str, str] | None = None
    ) -> dict[str, Any]:
        return {
            "id": fragment_id,
            "value": value,
            "confidence": 0.9,
            "grounding_status": "grounded",
            "created_at": _now(),
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
                "results": [
                    {
                        "operation": "dropped",
                        "fragment_id": None,
                        "superseded_fragment_id": None,
                        "reason": "privacy_drop",
                        "explanation": "The content carries a password.",
                    }
                ],
                "dropped": 1,
                "drop_reasons": ["privacy_drop"],
            }
        fragment_id = f"frag-{uuid.uuid4().hex[:12]}"
        if principal.kind == "agent":
            return {
                "outcome": "Parked for review: a person approves it before it becomes memory.",
                "results": [{"operation": "proposed", "fragment_id": None}],
                "review_state": "pending",
                "dropped": 0,
            }
        self.store.fragments.append(
            self._fragment(fragment_id, content, _owner(principal))
        )
        return {
            "outcome": "Stored 1 new fact.",
            "results": [{"operation": "stored", "fragment_id": fragment_id}],
            "dropped": 0,
        }

    async def receipt(self, principal: Principal, receipt_id: str) -> dict[str, Any]:
        self.store.calls.append(("receipt", principal, receipt_id))
        receipt = self.store.receipts.get(receipt_id)
        if receipt is None or receipt["owner"] != _owner(principal):
            raise MemoryServiceError(
                "not_found",
                "No receipt with this id is yours to replay; you can reopen only receipts of your own reads.",
            )
        return {
            "receipt_id": receipt_id,
            "query": receipt["query"],
            "as_of": receipt["as_of"],
            "agents": [],
            "roles": ["member"],
            "reader": principal.subject,
            "served_then": receipt["served"],
            "served_now": receipt["served"],
            "missing_now": [],
            "extra_now": [],
            "replayed": True,
        }

    async def probe(self, principal: Principal) -> str:
        return "ready"


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
