"""Composes the process's ASGI application: the MCP gateway owns /mcp and
/mcp/readonly (and the lifespan); every other path goes to Django, behind the
body guard (size caps while reading, a deadline: memoryhub.runtime.bodies).

In this single-process deployment the gateway verifies tokens against the
database and reaches memory through the in-process client; both sit behind
the same interfaces the edge deployment implements over HTTP."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import anyio
from django.conf import settings

from mcpapi.gateway import GatewaySettings, build_app
from mcpapi.serving import BODY_TIMEOUT_SECONDS, settle_heap
from memoryhub.runtime.bodies import BodyGuard


def gateway_settings() -> GatewaySettings:
    return GatewaySettings(
        base_url=settings.BASE_URL,
        allowed_origins=frozenset(settings.MEMORYHUB_ALLOWED_ORIGINS),
        redis_url=settings.REDIS_URL,
        rate_per_minute=settings.MEMORYHUB_RATE_PER_MINUTE,
        rate_burst=settings.MEMORYHUB_RATE_BURST,
        rate_limit_key_prefix=f"{settings.CACHES['default']['KEY_PREFIX']}:mcp:rate:",
        call_deadline=settings.MEMORYHUB_TOOL_DEADLINE_SECONDS,
        upstream_read_timeout=settings.MEMORYHUB_SEARCH_DEADLINE_SECONDS,
        body_read_seconds=BODY_TIMEOUT_SECONDS,
    )


def build_asgi_application(django_app: Any) -> Any:
    # Imported here, not at the top: they import models, which need the Django
    # application that memoryhub.asgi builds first.
    from memoryhub.mcp_adapter.client import inprocess_client_factory
    from memoryhub.mcp_adapter.verifier import DatabaseTokenVerifier
    from memoryhub.services.search import search_warm_up

    return WarmedAtStartup(build_app(
        verifier=DatabaseTokenVerifier(),
        client_factory=inprocess_client_factory,
        fallback=BodyGuard(django_app, timeout=BODY_TIMEOUT_SECONDS),
        settings=gateway_settings(),
    ), warm=search_warm_up)


class WarmedAtStartup:
    """`app`, with `warm` run (on a worker thread) when the server starts,
    before `app` hears of it: a server gives a worker requests only once its
    lifespan startup is complete, so no request waits for what `warm` does (a
    first search waited about half a second for the encoder to load). In a
    server's worker, its heap is settled (mcpapi.serving.settle_heap) once
    `app` has started too, before the server hears that it has."""

    def __init__(self, app: Any, *, warm: Callable[[], None]) -> None:
        self.app = app
        self.warm = warm

    async def __call__(self, scope: Any, receive: Any, send: Any) -> None:
        if scope["type"] != "lifespan":
            await self.app(scope, receive, send)
            return

        async def received() -> Any:
            message = await receive()
            if message["type"] == "lifespan.startup":
                await anyio.to_thread.run_sync(self.warm)
            return message

        async def sent(message: Any) -> None:
            if message["type"] == "lifespan.startup.complete":
                settle_heap()
            await send(message)

        await self.app(scope, received, sent)
