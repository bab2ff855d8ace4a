"""The MCP gateway's token check in the single-process deployment, answered
from this process's database (memoryhub.oauth.tokens)."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from asgiref.sync import sync_to_async
from django.db import close_old_connections

from mcpapi.client import Principal
from memoryhub.oauth.tokens import MAX_TOKEN_LENGTH, VerifiedToken, token_verified


@dataclass(frozen=True)
class HeldPrincipal(Principal):
    """A principal this process verified, carrying who holds the token as read
    with it (an `access.Holder`, opaque to the MCP layer): the memory client
    names the tool's caller from it without reading them again
    (mcp_adapter.client.caller_for)."""

    holder: Any = field(default=None, compare=False, repr=False)


def principal_of(verified: VerifiedToken, *, credential: str) -> Principal:
    """The MCP layer's principal for a token the domain verified."""
    return HeldPrincipal(
        tenant=verified.tenant, subject=verified.subject, kind=verified.kind, scopes=verified.scopes,
        client_id=verified.client_id, resource=verified.resource, credential=credential, holder=verified.holder,
    )


class DatabaseTokenVerifier:
    """`mcpapi.client.TokenVerifier` over this process's database."""

    async def verify(self, token: str, *, resource: str) -> Principal | None:
        if not token or len(token) > MAX_TOKEN_LENGTH:
            return None
        # Not thread-sensitive: verification runs on every MCP request and must not
        # queue behind Django's one shared sync thread.
        return await sync_to_async(_verify_in_thread, thread_sensitive=False)(token, resource)


def _verify_in_thread(token: str, resource: str) -> Principal | None:
    # A pool thread outlives the request; treat each call as Django treats a request.
    close_old_connections()
    try:
        verified = token_verified(token, resource=resource)
        return principal_of(verified, credential=token) if verified is not None else None
    finally:
        close_old_connections()
