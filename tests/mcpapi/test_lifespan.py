"""The gateway owns the ASGI lifespan; the fallback never sees it."""

from __future__ import annotations

from typing import Any

from mcpapi.gateway import GatewaySettings, build_app
from tests.support.lifespan import lifespan_messages

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

    assert lifespan_messages(app) == ["lifespan.startup.complete", "lifespan.shutdown.complete"]
    assert seen == []
