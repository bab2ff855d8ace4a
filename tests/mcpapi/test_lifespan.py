"""The gateway owns the ASGI lifespan; the fallback never sees it."""

from __future__ import annotations

from typing import Any

import anyio

from mcpapi.gateway import GatewaySettings, build_app

from .fakes import FakeVerifier, MemoryStore
from .live import KEY_PREFIX, REDIS_URL


def test_it_answers_the_lifespan_itself() -> None:
    seen: list[str] = []

    async def fallback(scope: dict[str, Any], receive: Any, send: Any) -> None:
        seen.append(scope["type"])

    app = build_app(
        verifier=FakeVerifier(),
        client_factory=MemoryStore().factory,
        fallback=fallback,
        settings=GatewaySettings(
            base_url="http://testserver",
            redis_url=REDIS_URL,
            rate_limit_key_prefix=KEY_PREFIX,
        ),
    )

    async def run() -> list[str]:
        inbox = [{"type": "lifespan.startup"}, {"type": "lifespan.shutdown"}]
        outbox: list[str] = []

        async def receive() -> dict[str, str]:
            return inbox.pop(0)

        async def send(message: dict[str, str]) -> None:
            outbox.append(message["type"])

        await app({"type": "lifespan", "asgi": {"version": "3.0"}}, receive, send)
        return outbox

    assert anyio.run(run) == ["lifespan.startup.complete", "lifespan.shutdown.complete"]
    assert seen == []
