"""An ASGI application's lifespan, run as a server runs it: a startup, then a shutdown."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import anyio


def lifespan_messages(application: Any, *, on_send: Callable[[str], None] | None = None) -> list[str]:
    """The message types `application` sends for a startup and a shutdown, in
    order; `on_send` is called with each as it is sent (to see the process's
    state at that moment)."""
    async def run() -> list[str]:
        inbox = [{"type": "lifespan.startup"}, {"type": "lifespan.shutdown"}]
        outbox: list[str] = []

        async def receive() -> dict[str, str]:
            return inbox.pop(0)

        async def send(message: dict[str, str]) -> None:
            if on_send is not None:
                on_send(message["type"])
            outbox.append(message["type"])

        await application({"type": "lifespan", "asgi": {"version": "3.0"}}, receive, send)
        return outbox

    return anyio.run(run)
