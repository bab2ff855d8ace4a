"""Who is calling, on which endpoint: the gateway puts it in the ASGI scope,
tool handlers read it back through `ctx.request.scope`."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, Final, Literal

from mcpapi.client import Principal

Endpoint = Literal["/mcp", "/mcp/readonly"]
FULL_ENDPOINT: Final[Endpoint] = "/mcp"
READONLY_ENDPOINT: Final[Endpoint] = "/mcp/readonly"
ENDPOINTS: Final[tuple[Endpoint, ...]] = (FULL_ENDPOINT, READONLY_ENDPOINT)

SCOPE_PRINCIPAL: Final = "mcpapi.principal"
SCOPE_ENDPOINT: Final = "mcpapi.endpoint"


@dataclass(frozen=True)
class Caller:
    principal: Principal
    endpoint: Endpoint


def scope_with_caller(scope: Mapping[str, Any], caller: Caller) -> dict[str, Any]:
    return {**scope, SCOPE_PRINCIPAL: caller.principal, SCOPE_ENDPOINT: caller.endpoint}


def caller_from_scope(scope: Mapping[str, Any] | None) -> Caller | None:
    if scope is None:
        return None
    principal = scope.get(SCOPE_PRINCIPAL)
    endpoint = scope.get(SCOPE_ENDPOINT)
    if not isinstance(principal, Principal) or endpoint not in ENDPOINTS:
        return None
    return Caller(principal=principal, endpoint=endpoint)
