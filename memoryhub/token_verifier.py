"""The MCP endpoint's token check, answered from this process's database.

`DatabaseTokenVerifier` implements `mcpapi.client.TokenVerifier`. A token
resolves to a principal only when it is a DOT access token (looked up by its
checksum: tokens are stored hashed), unexpired, issued for exactly the resource
being called, carrying at least one memory scope, and held by someone still
entitled to it:

- a person: active, in a workspace. subject = "user:<username>".
- an agent: registered by a workspace admin, not revoked. subject = "agent:<name>"
  (agent names are unique within their workspace). Its scopes are cut to what its
  admin grants today, and never include memory.audit.

Everything else (registration tokens, a source's ingest token, a token for
/mcp used at /mcp/readonly or the reverse) resolves to None.
"""

from __future__ import annotations

from asgiref.sync import sync_to_async
from django.db import close_old_connections
from oauth2_provider.models import AccessToken

from mcpapi.client import Principal, PrincipalKind
from memoryhub.models import Agent, Membership
from memoryhub.oauth import token_checksum
from memoryhub.services.workspaces import AGENT_SCOPES, MEMORY_SCOPES

# DOT's tokens are 30 characters; anything far longer is not one of ours and is
# not worth hashing.
MAX_TOKEN_LENGTH = 512


class DatabaseTokenVerifier:
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
        return principal_for(token, resource=resource)
    finally:
        close_old_connections()


def access_token_row(token: str) -> AccessToken | None:
    """The stored token (with its application and user) for a raw token, or None."""
    return (
        AccessToken.objects.select_related("application", "user")
        .filter(token_checksum=token_checksum(token))
        .first()
    )


def principal_for(token: str, *, resource: str) -> Principal | None:
    access = access_token_row(token)
    return principal_of(access, token, resource=resource) if access is not None else None


def principal_of(access: AccessToken, token: str, *, resource: str) -> Principal | None:
    """The principal a stored token (`access`, the row of raw `token`) stands for at `resource`, or None."""
    if access.is_expired() or access.application is None:
        return None
    # Exact match: DOT's own check is a URL-prefix match, which would let a
    # /mcp token through at /mcp/readonly.
    if resource not in (access.resource or []):
        return None
    scopes = frozenset(access.scope.split()) & frozenset(MEMORY_SCOPES)
    kind: PrincipalKind
    agent = Agent.objects.filter(application=access.application).first()
    if agent is not None:
        if agent.kind != Agent.Kind.ASSISTANT or agent.revoked_at is not None:
            return None
        scopes &= agent.scope_set & frozenset(AGENT_SCOPES)
        tenant, subject, kind = str(agent.tenant_id), f"agent:{agent.name}", "agent"
    else:
        user = access.user
        if user is None or not user.is_active or user.tenant_id is None:
            return None
        if not Membership.objects.filter(user=user, tenant_id=user.tenant_id).exists():
            return None
        tenant, subject, kind = str(user.tenant_id), f"user:{user.username}", "user"
    if not scopes:
        return None
    return Principal(
        tenant=tenant,
        subject=subject,
        kind=kind,
        scopes=scopes,
        client_id=access.application.client_id,
        resource=resource,
        credential=token,
    )
