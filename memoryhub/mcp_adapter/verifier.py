"""The MCP gateway's token check in the single-process deployment, answered
from this process's database (memoryhub.oauth.tokens)."""

from __future__ import annotations

from asgiref.sync import sync_to_async
from django.db import close_old_connections

from mcpapi.client import Principal
from memoryhub.oauth.tokens import MAX_TOKEN_LENGTH, VerifiedToken, token_verified


def principal_of(verified: VerifiedToken, *, credential: str) -> Principal:
    """The MCP layer's principal for a token the domain verified."""
    return Principal(
        tenant=verified.tenant, subject=verified.subject, kind=verified.kind, scopes=verified.scopes,
        client_id=verified.client_id, resource=verified.resource, credential=credential,
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
