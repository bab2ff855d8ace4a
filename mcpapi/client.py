"""The only way the MCP endpoint reaches the memory domain.

`mcpapi` never imports models or services: a tool handler holds a
`MemoryClient` bound to the request's verified credential and calls it.
Two implementations exist behind this interface: an in-process one for the
single-process deployment, and an HTTP one for the edge deployment where the
MCP process has no database and no standing secret.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Literal, Protocol

from contract.scopes import MEMORY_SCOPES

PrincipalKind = Literal["user", "agent"]


@dataclass(frozen=True)
class Principal:
    """Who the verified token says the caller is. Nothing else sets these."""

    tenant: str
    subject: str
    kind: PrincipalKind
    scopes: frozenset[str]
    client_id: str
    # The resource URL the token was issued for (RFC 8707 audience).
    resource: str
    # Opaque, request-lived credential for the memory service. In-process it
    # is the verified token itself; at the edge it is the exchanged credential.
    credential: str = field(repr=False, default="")

    @property
    def memory_scopes(self) -> list[str]:
        return sorted(s for s in self.scopes if s in MEMORY_SCOPES)


class MemoryServiceError(Exception):
    """A refusal the domain reports (bad argument, unknown receipt...)."""

    def __init__(self, code: str, message: str) -> None:
        super().__init__(message)
        self.code = code
        self.message = message


class VerificationThrottled(Exception):
    """The authority behind a verifier refused to check this token for now
    (too many checks of it); the caller should retry after `retry_after` seconds."""

    def __init__(self, retry_after: int) -> None:
        super().__init__(f"token verification throttled; retry after {retry_after} s")
        self.retry_after = max(1, retry_after)


class TokenVerifier(Protocol):
    async def verify(self, token: str, *, resource: str) -> Principal | None:
        """Return the principal for a valid, unexpired token issued for
        `resource`, or None. May raise VerificationThrottled."""


class MemoryClient(Protocol):
    """`arguments` are the tool's validated arguments with defaults applied;
    date-time fields arrive as timezone-aware `datetime`s. Results follow the
    tool's output schema (see `mcpapi.schemas`)."""

    async def search(self, principal: Principal, arguments: dict[str, Any]) -> dict[str, Any]: ...

    async def write(self, principal: Principal, arguments: dict[str, Any]) -> dict[str, Any]: ...

    async def receipt(self, principal: Principal, receipt_id: str) -> dict[str, Any]: ...

    async def probe(self, principal: Principal) -> str:
        """read_pool_ready: 'ready', 'degraded' or 'unavailable', from a real
        probe read under this principal's rights."""
        ...


class MemoryClientFactory(Protocol):
    def __call__(self, *, read_timeout: float) -> MemoryClient:
        """A client for one tool call. Each upstream read it makes must give up
        after `read_timeout` seconds; the caller also enforces that bound."""
        ...
