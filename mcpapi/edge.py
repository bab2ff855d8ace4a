"""The edge deployment's side of the two `mcpapi.client` interfaces, over HTTP.

An edge process runs the gateway and the tools but has no database and no
secret. Per MCP request:

1. `ExchangingTokenVerifier` sends the caller's token to the authorisation
   server's RFC 8693 token exchange, once. The answer is both the verification
   (tenant, subject, kind, scopes, resource) and a credential for the memory
   service that lives as long as the call. The caller's token goes nowhere else.
2. `HttpMemoryClient` calls the memory service's internal API with that
   credential (`Principal.credential`) and nothing else.

No Django here: `httpx2` (the SDK's HTTP client) and the standard library only.
"""

from __future__ import annotations

import datetime as dt
import json
import logging
import uuid
from typing import Any, Final

import httpx2

from mcpapi import observe
from mcpapi.client import MemoryServiceError, Principal, PrincipalKind, VerificationThrottled

logger = logging.getLogger(__name__)

TOKEN_EXCHANGE_GRANT: Final = "urn:ietf:params:oauth:grant-type:token-exchange"
ACCESS_TOKEN_TYPE: Final = "urn:ietf:params:oauth:token-type:access_token"
READ_TIMEOUT_HEADER: Final = "Memoryhub-Read-Timeout"
INTERNAL_PATH: Final = "/internal/memory"
# Answers that mean "this token opens nothing here" (RFC 6749 §5.2, RFC 8693 §2.2.2).
# Anything else that is not a 200 is the exchange failing, not the caller.
_REFUSALS: Final = frozenset({"invalid_grant", "invalid_target", "invalid_scope", "invalid_request"})
# Far longer than any token we issue; not worth a round trip.
MAX_TOKEN_LENGTH: Final = 4096
PROBE_STATES: Final = frozenset({"ready", "degraded", "unavailable"})


class UpstreamUnavailable(RuntimeError):
    """The authorisation server or the memory service did not answer usefully.
    The gateway turns it into 503 (verification) or a generic tool error."""


class ExchangingTokenVerifier:
    """`mcpapi.client.TokenVerifier` for the edge: verification by token exchange."""

    def __init__(self, *, http: httpx2.AsyncClient, token_url: str, audience: str, timeout: float = 5.0) -> None:
        self._http = http
        self._token_url = token_url
        self._audience = audience
        self._timeout = timeout

    async def verify(self, token: str, *, resource: str) -> Principal | None:
        if not token or len(token) > MAX_TOKEN_LENGTH:
            return None
        try:
            response = await self._http.post(
                self._token_url,
                data={
                    "grant_type": TOKEN_EXCHANGE_GRANT,
                    "subject_token": token,
                    "subject_token_type": ACCESS_TOKEN_TYPE,
                    "requested_token_type": ACCESS_TOKEN_TYPE,
                    "resource": resource,
                    "audience": self._audience,
                },
                timeout=self._timeout,
            )
        except httpx2.HTTPError as exc:
            raise UpstreamUnavailable(f"token exchange failed: {type(exc).__name__}") from exc
        body = _json_object(response)
        if response.status_code == 200 and body is not None:
            return self._principal(body, resource=resource)
        if response.status_code == 400 and body is not None and body.get("error") in _REFUSALS:
            return None
        if response.status_code == 429:
            raise VerificationThrottled(_retry_after(response))
        raise UpstreamUnavailable(f"token exchange answered {response.status_code}")

    def _principal(self, body: dict[str, Any], *, resource: str) -> Principal:
        """The answer, checked: a malformed one is the server failing, never a principal."""
        fields = ("access_token", "tenant", "subject", "client_id", "scope")
        if any(not isinstance(body.get(name), str) for name in fields) or not body["access_token"]:
            raise UpstreamUnavailable("token exchange answer is missing fields")
        if body.get("issued_token_type") != ACCESS_TOKEN_TYPE or body.get("audience") != self._audience:
            raise UpstreamUnavailable("token exchange issued a credential for something else")
        if body.get("resource") != resource:
            raise UpstreamUnavailable("token exchange answered for another resource")
        kind = body.get("principal_kind")
        if kind not in ("user", "agent"):
            raise UpstreamUnavailable("token exchange named no principal kind")
        principal_kind: PrincipalKind = "user" if kind == "user" else "agent"
        return Principal(
            tenant=body["tenant"],
            subject=body["subject"],
            kind=principal_kind,
            scopes=frozenset(body["scope"].split()),
            client_id=body["client_id"],
            resource=resource,
            credential=body["access_token"],
        )


class HttpMemoryClient:
    """`mcpapi.client.MemoryClient` over the memory service's internal API."""

    def __init__(self, *, http: httpx2.AsyncClient, service_url: str, read_timeout: float) -> None:
        self._http = http
        self._base = service_url.rstrip("/") + INTERNAL_PATH
        self._read_timeout = read_timeout

    async def search(self, principal: Principal, arguments: dict[str, Any]) -> dict[str, Any]:
        return await self._call("search", principal, arguments)

    async def write(self, principal: Principal, arguments: dict[str, Any]) -> dict[str, Any]:
        return await self._call("write", principal, arguments)

    async def receipt(self, principal: Principal, receipt_id: str) -> dict[str, Any]:
        return await self._call("receipt", principal, {"receipt_id": receipt_id})

    async def probe(self, principal: Principal) -> str:
        try:
            answer = await self._call("probe", principal, {})
        except Exception:  # noqa: BLE001 - whoami reports a failing probe as a state
            logger.warning("read-pool probe through the memory service failed", exc_info=True)
            return "unavailable"
        state = answer.get("read_pool_ready")
        return state if state in PROBE_STATES else "unavailable"

    async def _call(self, operation: str, principal: Principal, payload: dict[str, Any]) -> dict[str, Any]:
        if not principal.credential:
            raise MemoryServiceError("unauthorized", "This request carries no memory-service credential.")
        try:
            response = await self._http.post(
                f"{self._base}/{operation}",
                content=json.dumps(payload, default=_json_plain).encode(),
                headers={
                    "Authorization": f"Bearer {principal.credential}",
                    "Content-Type": "application/json",
                    READ_TIMEOUT_HEADER: f"{self._read_timeout:g}",
                    # One request id on both sides of the hop, in both processes' logs.
                    "X-Request-Id": observe.REQUEST_ID.get(),
                },
                # The tool layer bounds the call at read_timeout and says so; the
                # socket gives it a moment more so that message is the one seen.
                timeout=self._read_timeout + 1.0,
            )
        except httpx2.HTTPError as exc:
            raise UpstreamUnavailable(f"memory service {operation} failed: {type(exc).__name__}") from exc
        body = _json_object(response)
        if response.status_code == 200 and body is not None:
            return body
        error = body.get("error") if body is not None else None
        if isinstance(error, dict) and isinstance(error.get("code"), str) and isinstance(error.get("message"), str):
            if response.status_code == 401:
                raise MemoryServiceError(
                    "unauthorized",
                    "The memory service refused this request's credential; retry as a new request.",
                )
            raise MemoryServiceError(error["code"], error["message"])
        raise UpstreamUnavailable(f"memory service {operation} answered {response.status_code}")


class HttpMemoryClientFactory:
    """`mcpapi.client.MemoryClientFactory` for the edge: one pooled HTTP client."""

    def __init__(self, *, http: httpx2.AsyncClient, service_url: str) -> None:
        self._http = http
        self._service_url = service_url

    def __call__(self, *, read_timeout: float) -> HttpMemoryClient:
        return HttpMemoryClient(http=self._http, service_url=self._service_url, read_timeout=read_timeout)


def _json_object(response: httpx2.Response) -> dict[str, Any] | None:
    try:
        body = response.json()
    except ValueError:
        return None
    return body if isinstance(body, dict) else None


def _json_plain(value: Any) -> Any:
    if isinstance(value, dt.datetime | dt.date):
        return value.isoformat()
    if isinstance(value, uuid.UUID):
        return str(value)
    raise TypeError(f"{type(value).__name__} is not JSON serialisable")


def _retry_after(response: httpx2.Response) -> int:
    """The seconds a 429 asks for (RFC 9110 delay-seconds); 1 when absent or a date."""
    value = response.headers.get("retry-after", "")
    return int(value) if value.isascii() and value.isdigit() else 1
