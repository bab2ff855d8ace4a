"""The ASGI gateway in front of the SDK: HTTP policy for /mcp and /mcp/readonly.

In order: Origin, POST only, body size, bearer token, rate limit, one JSON-RPC
message, protocol revision, tool scope; then the SDK's stateless session
manager serves the request with the caller in the ASGI scope. It also owns the
ASGI lifespan and hands every other path to `fallback` (Django in the project).
"""

from __future__ import annotations

import logging
import time
from collections.abc import Collection, Mapping
from contextlib import AsyncExitStack
from dataclasses import dataclass, field
from typing import Any, Final

import anyio
import mcp_types as types
from mcp.server.streamable_http_manager import StreamableHTTPSessionManager
from mcp.server.transport_security import TransportSecuritySettings
from starlette.datastructures import Headers
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from mcpapi import observe
from mcpapi.auth import bearer_challenge, presented_token, resource_metadata_url, resource_url
from mcpapi.catalog import CATALOG, missing_scope
from mcpapi.client import MEMORY_SCOPES, MemoryClientFactory, TokenVerifier, VerificationThrottled
from mcpapi.connection import ENDPOINTS, FULL_ENDPOINT, Connection, Endpoint, scope_with_connection
from mcpapi.ratelimit import RateLimiter
from mcpapi.rpc import Refusal, read_message, revision_refusal
from mcpapi.server import CallLimits, build_server

logger = logging.getLogger(__name__)

# Implementation-defined JSON-RPC codes for HTTP-level refusals.
UNAUTHORIZED: Final = -32001
FORBIDDEN: Final = -32003
RATE_LIMITED: Final = -32029
UNAVAILABLE: Final = -32050

_SESSION_HEADER: Final = b"mcp-session-id"


@dataclass(frozen=True)
class GatewaySettings:
    base_url: str
    allowed_origins: Collection[str] = field(default_factory=frozenset)
    redis_url: str = "redis://127.0.0.1:6379/0"
    rate_per_minute: int = 60
    rate_burst: int = 10
    rate_limit_key_prefix: str = "memoryhub:mcp:rate:"
    max_body_bytes: int = 256 * 1024
    # A slow body is refused (408) rather than waited for (the server protocol
    # has the same bound, mcpapi.serving; this one holds under any server).
    body_read_seconds: float = 30.0
    call_deadline: float = 25.0
    upstream_read_timeout: float = 20.0

    def __post_init__(self) -> None:
        if not self.base_url.startswith(("https://", "http://")):
            raise ValueError("base_url must be an absolute http(s) URL")
        if self.max_body_bytes <= 0:
            raise ValueError("max_body_bytes must be positive")
        object.__setattr__(self, "allowed_origins", frozenset(_origin(o) for o in self.allowed_origins))


def _origin(value: str) -> str:
    return value.strip().rstrip("/").lower()


def build_app(
    *,
    verifier: TokenVerifier,
    client_factory: MemoryClientFactory,
    fallback: ASGIApp,
    settings: GatewaySettings,
) -> Gateway:
    limits = CallLimits(call_deadline=settings.call_deadline, upstream_read_timeout=settings.upstream_read_timeout)
    managers = {
        endpoint: StreamableHTTPSessionManager(
            app=build_server(client_factory=client_factory, endpoint=endpoint, limits=limits),
            stateless=True,
            json_response=True,
            max_request_body_size=settings.max_body_bytes,
            # Origin is checked here, with the rest of the HTTP policy.
            security_settings=TransportSecuritySettings(enable_dns_rebinding_protection=False),
        )
        for endpoint in ENDPOINTS
    }
    limiter = RateLimiter(
        redis_url=settings.redis_url,
        per_minute=settings.rate_per_minute,
        burst=settings.rate_burst,
        key_prefix=settings.rate_limit_key_prefix,
    )
    return Gateway(managers=managers, verifier=verifier, limiter=limiter, fallback=fallback, settings=settings)


class Gateway:
    def __init__(
        self,
        *,
        managers: Mapping[Endpoint, StreamableHTTPSessionManager],
        verifier: TokenVerifier,
        limiter: RateLimiter,
        fallback: ASGIApp,
        settings: GatewaySettings,
    ) -> None:
        self._managers = managers
        self._verifier = verifier
        self._limiter = limiter
        self._fallback = fallback
        self._settings = settings

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] == "lifespan":
            await self._lifespan(receive, send)
            return
        endpoint = _endpoint(scope)
        if endpoint is not None:
            await self._serve(endpoint, scope, receive, send)
            return
        await self._fallback(scope, receive, send)

    async def _lifespan(self, receive: Receive, send: Send) -> None:
        # Django's ASGI handler refuses lifespan messages, so they stop here.
        await receive()
        async with AsyncExitStack() as stack:
            try:
                for manager in self._managers.values():
                    await stack.enter_async_context(manager.run())
                stack.push_async_callback(self._limiter.aclose)
            except Exception as exc:  # noqa: BLE001
                logger.exception("MCP gateway failed to start")
                await send({"type": "lifespan.startup.failed", "message": str(exc)})
                return
            await send({"type": "lifespan.startup.complete"})
            await receive()
        await send({"type": "lifespan.shutdown.complete"})

    async def _serve(self, endpoint: Endpoint, scope: Scope, receive: Receive, send: Send) -> None:
        started = time.monotonic()
        headers = Headers(scope=scope)
        token = observe.REQUEST_ID.set(observe.request_id(headers.get("x-request-id")))
        note: dict[str, str] = {"principal_kind": "", "tool": ""}
        sent = _ResponseTracker(send)
        try:
            try:
                refusal = await self._admit_and_forward(endpoint, scope, receive, sent, note)
            except Exception:  # noqa: BLE001
                logger.exception("MCP request failed")
                refusal = None if sent.started else Refusal(500, types.INTERNAL_ERROR,
                                                            "Internal error; retry as a new request")
            if refusal is not None:
                await _respond(refusal, sent)
        finally:
            observe.log_request(endpoint=endpoint, status=sent.status, duration=time.monotonic() - started,
                                principal_kind=note["principal_kind"], tool=note["tool"])
            observe.REQUEST_ID.reset(token)

    async def _admit_and_forward(
        self, endpoint: Endpoint, scope: Scope, receive: Receive, send: Send, note: dict[str, str]
    ) -> Refusal | None:
        headers = Headers(scope=scope)
        admitted = await self._admit(endpoint, scope, headers)
        if isinstance(admitted, Refusal):
            return admitted
        note["principal_kind"] = admitted.principal.kind
        try:
            with anyio.fail_after(self._settings.body_read_seconds):
                body = await _read_body(receive, self._settings.max_body_bytes)
        except ClientGone:
            logger.warning("MCP request abandoned before its body arrived")
            return None
        except TimeoutError:
            logger.warning("MCP request body did not arrive within %g s", self._settings.body_read_seconds)
            return Refusal(408, types.INVALID_REQUEST, "The request body did not arrive in time; send it again.",
                           headers={"Connection": "close"})
        if body is None:
            return self._too_large()
        refusal = self._inspect(admitted, headers, body, note)
        if refusal is not None:
            return refusal
        await self._managers[endpoint].handle_request(
            scope_with_connection(scope, admitted), _replay(body, receive), _without_session_id(send)
        )
        return None

    async def _admit(self, endpoint: Endpoint, scope: Scope, headers: Headers) -> Connection | Refusal:
        """Everything decided before the body is read."""
        settings = self._settings
        origin = headers.get("origin")
        if origin is not None and _origin(origin) not in settings.allowed_origins:
            return Refusal(403, FORBIDDEN, "Origin not allowed")
        if scope["method"] != "POST":
            return Refusal(405, types.INVALID_REQUEST, "Method not allowed: POST only", headers={"Allow": "POST"})
        if _declared_length(headers) > settings.max_body_bytes:
            return self._too_large()
        caller = await self._authenticate(endpoint, headers)
        if isinstance(caller, Refusal):
            return caller
        try:
            with observe.step("rate_limit"):
                decision = await self._limiter.take(caller.principal)
        except Exception:  # noqa: BLE001
            # Failing closed: a limit that vanishes while Redis is down is no limit.
            logger.exception("rate limiter unavailable")
            return Refusal(503, UNAVAILABLE, "Rate limiter unavailable; retry shortly", headers={"Retry-After": "1"})
        if not decision.allowed:
            observe.RATE_LIMITED.inc()
            return self._rate_limited(decision.retry_after_seconds)
        return caller

    def _rate_limited(self, retry_after: int) -> Refusal:
        settings = self._settings
        return Refusal(
            429,
            RATE_LIMITED,
            f"Rate limit: {settings.rate_per_minute} requests a minute, bursts of {settings.rate_burst}. "
            f"Retry after {retry_after} s.",
            headers={"Retry-After": str(retry_after)},
        )

    def _inspect(self, caller: Connection, headers: Headers, body: bytes, note: dict[str, str]) -> Refusal | None:
        """One JSON-RPC message, an accepted revision, and the scope its tool needs."""
        message = read_message(body)
        if isinstance(message, Refusal):
            return message
        note["tool"] = message.tool_name or ""
        refusal = revision_refusal(headers.get("mcp-protocol-version"), message)
        if refusal is not None:
            return refusal
        if message.tool_name is not None:
            needed = missing_scope(CATALOG, caller, message.tool_name)
            if needed is not None:
                return self._insufficient_scope(caller.endpoint, message.tool_name, needed, message.id)
        return None

    async def _authenticate(self, endpoint: Endpoint, headers: Headers) -> Connection | Refusal:
        presented = presented_token(headers)
        if presented.token is None:
            observe.VERIFICATIONS.labels(outcome="missing").inc()
            return self._unauthorized(endpoint, invalid=presented.sent, why="A bearer token is required")
        resource = resource_url(self._settings.base_url, endpoint)
        try:
            with observe.step("token"):
                principal = await self._verifier.verify(presented.token, resource=resource)
        except VerificationThrottled as throttled:
            observe.VERIFICATIONS.labels(outcome="throttled").inc()
            return self._rate_limited(throttled.retry_after)
        except Exception:  # noqa: BLE001
            observe.VERIFICATIONS.labels(outcome="unavailable").inc()
            logger.exception("token verification failed")
            return Refusal(
                503,
                UNAVAILABLE,
                "Token verification is unavailable; retry shortly",
                headers={"Retry-After": "1"},
            )
        if principal is None or principal.resource != resource:
            observe.VERIFICATIONS.labels(outcome="invalid").inc()
            return self._unauthorized(
                endpoint, invalid=True, why="The token is invalid, expired or not for this resource"
            )
        if not principal.memory_scopes:
            # Any other token from the same issuer (a DCR registration token, say) opens nothing here.
            observe.VERIFICATIONS.labels(outcome="invalid").inc()
            return self._unauthorized(endpoint, invalid=True, why="The token carries no memory scope")
        observe.VERIFICATIONS.labels(outcome="valid").inc()
        return Connection(principal=principal, endpoint=endpoint)

    def _unauthorized(self, endpoint: Endpoint, *, invalid: bool, why: str) -> Refusal:
        challenge = bearer_challenge(
            metadata_url=resource_metadata_url(self._settings.base_url, endpoint),
            error="invalid_token" if invalid else None,
            scope=" ".join(self._scopes_for(endpoint)),
            description=why if invalid else None,
        )
        return Refusal(401, UNAUTHORIZED, why, headers={"WWW-Authenticate": challenge})

    def _insufficient_scope(self, endpoint: Endpoint, tool: str, scope: str, request_id: Any) -> Refusal:
        why = f"{tool} needs the {scope} scope"
        challenge = bearer_challenge(
            metadata_url=resource_metadata_url(self._settings.base_url, endpoint),
            error="insufficient_scope",
            scope=scope,
            description=why,
        )
        return Refusal(
            403,
            FORBIDDEN,
            f"insufficient_scope: {why}",
            id=request_id,
            headers={"WWW-Authenticate": challenge},
        )

    def _scopes_for(self, endpoint: Endpoint) -> list[str]:
        scopes = {spec.required_scope for spec in CATALOG if spec.required_scope is not None}
        if endpoint != FULL_ENDPOINT:
            scopes -= {spec.required_scope for spec in CATALOG if not spec.on_readonly_endpoint}
        return [scope for scope in MEMORY_SCOPES if scope in scopes]

    def _too_large(self) -> Refusal:
        return Refusal(
            413,
            types.INVALID_REQUEST,
            f"Request body exceeds {self._settings.max_body_bytes} bytes",
            headers={"Connection": "close"},
        )


class _ResponseTracker:
    def __init__(self, send: Send) -> None:
        self._send = send
        self.started = False
        self.status = 0

    async def __call__(self, message: Message) -> None:
        if message["type"] == "http.response.start":
            self.started = True
            self.status = int(message["status"])
            # Every answer names its request, for the logs on both sides.
            message = {**message, "headers": [*message.get("headers", []),
                                              (b"x-request-id", observe.REQUEST_ID.get().encode())]}
        await self._send(message)


def _endpoint(scope: Scope) -> Endpoint | None:
    if scope["type"] != "http":
        return None
    path = scope.get("path")
    return next((endpoint for endpoint in ENDPOINTS if endpoint == path), None)


def _declared_length(headers: Headers) -> int:
    value = headers.get("content-length")
    if value is None:
        return 0
    try:
        return int(value)
    except ValueError:
        return 0


class ClientGone(Exception):
    """The client went away (or was cut off) before its body arrived."""


async def _read_body(receive: Receive, limit: int) -> bytes | None:
    """The whole body, or None as soon as it grows past `limit`. A body the
    client never finished is never run: ClientGone."""
    chunks: list[bytes] = []
    size = 0
    while True:
        message = await receive()
        if message["type"] != "http.request":
            raise ClientGone
        chunk = message.get("body", b"")
        size += len(chunk)
        if size > limit:
            return None
        chunks.append(chunk)
        if not message.get("more_body", False):
            return b"".join(chunks)


def _replay(body: bytes, receive: Receive) -> Receive:
    delivered = False

    async def replay() -> Message:
        nonlocal delivered
        if not delivered:
            delivered = True
            return {"type": "http.request", "body": body, "more_body": False}
        return await receive()

    return replay


def _without_session_id(send: Send) -> Send:
    async def stripped(message: Message) -> None:
        if message["type"] == "http.response.start":
            message = {
                **message,
                "headers": [(k, v) for k, v in message.get("headers", []) if k.lower() != _SESSION_HEADER],
            }
        await send(message)

    return stripped


async def _respond(refusal: Refusal, send: Send) -> None:
    body = refusal.body()
    headers = [(b"content-type", b"application/json"), (b"content-length", str(len(body)).encode())]
    headers += [(name.lower().encode(), value.encode()) for name, value in refusal.headers.items()]
    await send({"type": "http.response.start", "status": refusal.status, "headers": headers})
    await send({"type": "http.response.body", "body": body})
