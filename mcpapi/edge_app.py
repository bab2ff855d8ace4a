"""ASGI entry for an edge process: the MCP gateway alone, with no database and no secret.

    uvicorn mcpapi.edge_app:application          # or: uvicorn --factory mcpapi.edge_app:create_app

It serves POST /mcp and /mcp/readonly through `mcpapi.gateway.build_app`,
verifies each caller by token exchange at the authorisation server and reaches
memory through the memory service's internal API (`mcpapi.edge`). GET /healthz
answers a small JSON document; every other path is 404 (the reverse proxy sends
OAuth, discovery and pages to the memory service).

Configured from the environment only, no Django settings:

    MEMORYHUB_BASE_URL         public origin; resource URLs are built from it (same value
                               as the memory service's). Default http://127.0.0.1:8000.
    MEMORYHUB_SERVICE_URL      the memory service (and its authorisation server) on the
                               private network. Default http://127.0.0.1:8000.
    MEMORYHUB_TOKEN_EXCHANGE_URL   default SERVICE_URL + /o/token/exchange/ (RFC 8693).
    MEMORYHUB_SERVICE_AUDIENCE default BASE_URL + /internal/memory (same as the service's).
    REDIS_URL, MEMORYHUB_CACHE_PREFIX   shared rate-limit buckets, keyed as the service keys them.
    MEMORYHUB_ALLOWED_ORIGINS  comma-separated browser origins. Default: the base URL.
    MEMORYHUB_RATE_PER_MINUTE / MEMORYHUB_RATE_BURST                      60 / 10 per principal.
    MEMORYHUB_TOOL_DEADLINE_SECONDS / MEMORYHUB_SEARCH_DEADLINE_SECONDS   25 / 20.
    MEMORYHUB_EXCHANGE_TIMEOUT_SECONDS   bound on one token exchange. Default 5.

It refuses to start when SECRET_KEY or DATABASE_URL is set: an edge that holds
either is no longer the process contract 001 describes.
"""

from __future__ import annotations

import json
import os
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, Final

import httpx2
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from mcpapi.edge import ExchangingTokenVerifier, HttpMemoryClientFactory
from mcpapi.gateway import GatewaySettings, build_app

FORBIDDEN_ENVIRONMENT: Final = ("SECRET_KEY", "DATABASE_URL")
HEALTH_PATH: Final = "/healthz"


@dataclass(frozen=True)
class EdgeSettings:
    gateway: GatewaySettings
    service_url: str
    token_exchange_url: str
    service_audience: str
    exchange_timeout: float = 5.0


def edge_settings(environ: Mapping[str, str]) -> EdgeSettings:
    present = [name for name in FORBIDDEN_ENVIRONMENT if environ.get(name)]
    if present:
        raise RuntimeError(f"The edge holds no secret and no database; unset {', '.join(present)} in its environment.")

    def text(name: str, default: str) -> str:
        return (environ.get(name) or default).strip()

    base_url = text("MEMORYHUB_BASE_URL", "http://127.0.0.1:8000").rstrip("/")
    service_url = text("MEMORYHUB_SERVICE_URL", "http://127.0.0.1:8000").rstrip("/")
    origins = [item.strip() for item in text("MEMORYHUB_ALLOWED_ORIGINS", base_url).split(",") if item.strip()]
    gateway = GatewaySettings(
        base_url=base_url,
        allowed_origins=frozenset(origins),
        redis_url=text("REDIS_URL", "redis://127.0.0.1:6379/0"),
        rate_per_minute=int(text("MEMORYHUB_RATE_PER_MINUTE", "60")),
        rate_burst=int(text("MEMORYHUB_RATE_BURST", "10")),
        rate_limit_key_prefix=f"{text('MEMORYHUB_CACHE_PREFIX', 'memoryhub')}:mcp:rate:",
        call_deadline=float(text("MEMORYHUB_TOOL_DEADLINE_SECONDS", "25")),
        upstream_read_timeout=float(text("MEMORYHUB_SEARCH_DEADLINE_SECONDS", "20")),
    )
    return EdgeSettings(
        gateway=gateway,
        service_url=service_url,
        token_exchange_url=text("MEMORYHUB_TOKEN_EXCHANGE_URL", f"{service_url}/o/token/exchange/"),
        service_audience=text("MEMORYHUB_SERVICE_AUDIENCE", f"{base_url}/internal/memory"),
        exchange_timeout=float(text("MEMORYHUB_EXCHANGE_TIMEOUT_SECONDS", "5")),
    )


def build_edge_app(settings: EdgeSettings) -> ASGIApp:
    # One pooled client for both hops; keep-alive is most of what makes the hop cheap.
    http = httpx2.AsyncClient(
        limits=httpx2.Limits(max_connections=200, max_keepalive_connections=50),
        follow_redirects=False,
        trust_env=False,
    )
    gateway = build_app(
        verifier=ExchangingTokenVerifier(
            http=http,
            token_url=settings.token_exchange_url,
            audience=settings.service_audience,
            timeout=settings.exchange_timeout,
        ),
        client_factory=HttpMemoryClientFactory(http=http, service_url=settings.service_url),
        fallback=_health_or_not_found,
        settings=settings.gateway,
    )
    return _ClosesClient(gateway, http)


def create_app() -> ASGIApp:
    """uvicorn --factory mcpapi.edge_app:create_app"""
    return build_edge_app(edge_settings(os.environ))


def __getattr__(name: str) -> Any:
    # `mcpapi.edge_app:application` for servers without a factory option; built on
    # first access so importing this module reads no environment.
    if name == "application":
        return create_app()
    raise AttributeError(name)


class _ClosesClient:
    """Closes the HTTP pool when the gateway's lifespan has shut down."""

    def __init__(self, app: ASGIApp, http: httpx2.AsyncClient) -> None:
        self._app = app
        self._http = http

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "lifespan":
            await self._app(scope, receive, send)
            return

        async def closing(message: Message) -> None:
            if message["type"] in ("lifespan.shutdown.complete", "lifespan.startup.failed"):
                await self._http.aclose()
            await send(message)

        await self._app(scope, receive, closing)


async def _health_or_not_found(scope: Scope, receive: Receive, send: Send) -> None:
    if scope["type"] == "websocket":
        await send({"type": "websocket.close", "code": 1000})
        return
    if scope["type"] != "http":
        return
    if scope["path"] == HEALTH_PATH and scope["method"] in ("GET", "HEAD"):
        status, body = 200, {"status": "ok", "role": "edge"}
    else:
        status, body = 404, {"error": "not_found"}
    payload = json.dumps(body).encode()
    await send(
        {
            "type": "http.response.start",
            "status": status,
            "headers": [(b"content-type", b"application/json"), (b"content-length", str(len(payload)).encode())],
        }
    )
    await send({"type": "http.response.body", "body": payload if scope["method"] != "HEAD" else b""})
