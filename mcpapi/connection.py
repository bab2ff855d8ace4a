"""The connection a request arrived on: who is calling (the verified
principal) and on which endpoint. The gateway puts it in the ASGI scope, tool
handlers read it back through `ctx.request.scope`."""

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
class Connection:
    principal: Principal
    endpoint: Endpoint


def scope_with_connection(scope: Mapping[str, Any], connection: Connection) -> dict[str, Any]:
    return {**scope, SCOPE_PRINCIPAL: connection.principal, SCOPE_ENDPOINT: connection.endpoint}


def connection_from_scope(scope: Mapping[str, Any] | None) -> Connection | None:
    if scope is None:
        return None
    principal = scope.get(SCOPE_PRINCIPAL)
    endpoint = scope.get(SCOPE_ENDPOINT)
    if not isinstance(principal, Principal) or endpoint not in ENDPOINTS:
        return None
    return Connection(principal=principal, endpoint=endpoint)
