"""Composes the process's ASGI application."""

from __future__ import annotations

from typing import Any


def build_asgi_application(django_app: Any) -> Any:
    async def application(scope: dict, receive: Any, send: Any) -> None:
        if scope["type"] == "lifespan":
            # Django's ASGI handler refuses lifespan messages; acknowledge them here.
            while True:
                message = await receive()
                if message["type"] == "lifespan.startup":
                    await send({"type": "lifespan.startup.complete"})
                elif message["type"] == "lifespan.shutdown":
                    await send({"type": "lifespan.shutdown.complete"})
                    return
        await django_app(scope, receive, send)

    return application
