"""The plainest ASGI application: it answers every request with the process
it runs in and the share of the cores it was given (mcpapi.serving's workers,
started for real)."""

from __future__ import annotations

import json
import os
from typing import Any

from mcpapi.serving import CORES_PER_PROCESS


async def app(scope: dict[str, Any], receive: Any, send: Any) -> None:
    if scope["type"] == "lifespan":
        while True:
            message = await receive()
            if message["type"] == "lifespan.startup":
                await send({"type": "lifespan.startup.complete"})
            elif message["type"] == "lifespan.shutdown":
                await send({"type": "lifespan.shutdown.complete"})
                return
    body = json.dumps({"pid": os.getpid(), "share": os.environ.get(CORES_PER_PROCESS)}).encode()
    await send({"type": "http.response.start", "status": 200,
                "headers": [(b"content-type", b"application/json"), (b"connection", b"close")]})
    await send({"type": "http.response.body", "body": body})
