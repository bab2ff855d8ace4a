"""Verifying an access token for one of our resources, from this process's
database.

A token verifies only when it is a django-oauth-toolkit access token (looked up
by its checksum: tokens are stored hashed), unexpired, issued for exactly the
resource being called, and held by someone still entitled to it
(memoryhub.access.token_holder: a live person of a workspace, or a live agent);
its scopes are cut to what that holder may hold today and must leave at least
one memory scope. Registration tokens, a source's ingest token, and a token for
/mcp used at /mcp/readonly (or the reverse) do not verify.

Used by the MCP adapter's token verifier, the token exchange and the internal
API. The result is a `VerifiedToken` of the domain; the MCP adapter turns it
into the MCP layer's principal.
"""

from __future__ import annotations

import hashlib
import logging
from dataclasses import dataclass
from datetime import timedelta
from typing import Literal

from django.db import DatabaseError, transaction
from django.utils import timezone
from oauth2_provider.models import AccessToken

from memoryhub import access
from memoryhub.access import MEMORY_SCOPES
from memoryhub.database.lookups import Lookup

# DOT's tokens are 30 characters; anything far longer is not one of ours and is
# not worth hashing.
MAX_TOKEN_LENGTH = 512


@dataclass(frozen=True)
class VerifiedToken:
    """Who a verified token says the caller is, and what it opens."""

    tenant: str
    subject: str
    kind: Literal["user", "agent"]
    scopes: frozenset[str]
    client_id: str
    # The resource (RFC 8707 audience) it was verified for.
    resource: str

    @property
    def memory_scopes(self) -> list[str]:
        return sorted(s for s in self.scopes if s in MEMORY_SCOPES)


def token_checksum(raw_token: str) -> str:
    """The lookup key DOT stores for a token (the token itself is not stored)."""
    return hashlib.sha256(raw_token.encode("utf-8")).hexdigest()


# By its checksum, with its application, its user and who holds it
# (access.TOKEN_HOLDER_RELATED): compiled once per connection, run prepared.
_TOKEN_WITH_HOLDER: Lookup[AccessToken] = Lookup(
    lambda checksum: AccessToken.objects.select_related(*access.TOKEN_HOLDER_RELATED).filter(
        token_checksum=checksum), str)


def access_token_row(token: str) -> AccessToken | None:
    """The stored token for a raw token, or None: read with its application,
    its user and who holds it (access.TOKEN_HOLDER_RELATED), in one statement."""
    if not token or len(token) > MAX_TOKEN_LENGTH:
        return None
    return _TOKEN_WITH_HOLDER.first(token_checksum(token))


def token_verified(token: str, *, resource: str) -> VerifiedToken | None:
    row = access_token_row(token)
    return verified_row(row, resource=resource) if row is not None else None


def verified_row(row: AccessToken, *, resource: str) -> VerifiedToken | None:
    """What a stored token stands for at `resource`, or None."""
    if row.is_expired() or row.application is None:
        return None
    # Exact match: DOT's own check is a URL-prefix match, which would let a
    # /mcp token through at /mcp/readonly.
    if resource not in (row.resource or []):
        return None
    holder = access.token_holder(application=row.application, user=row.user, read_with_token=True)
    if holder is None:
        return None
    scopes = access.scopes_at_mcp(holder, row.scope.split())
    if not scopes or holder.kind == "source":
        return None
    mark_used(row)
    return VerifiedToken(
        tenant=str(holder.tenant.pk), subject=holder.subject, kind=holder.kind, scopes=scopes,
        client_id=row.application.client_id, resource=resource,
    )


logger = logging.getLogger("memoryhub.oauth")

# A person's connected apps page shows when an app last used its access, to the minute.
LAST_USED_RESOLUTION = timedelta(minutes=1)


def mark_used(row: AccessToken) -> None:
    """At most one write a minute per token (the condition is in the UPDATE,
    so concurrent requests do not queue on the row); verification never fails
    because the write did (a read-only standby, say)."""
    now = timezone.now()
    if row.updated is not None and now - row.updated < LAST_USED_RESOLUTION:
        return
    try:
        with transaction.atomic():  # a savepoint when inside a transaction: its failure stays here
            AccessToken.objects.filter(pk=row.pk, updated__lt=now - LAST_USED_RESOLUTION).update(updated=now)
    except DatabaseError:
        logger.warning("could not record a token's last use", exc_info=True)
