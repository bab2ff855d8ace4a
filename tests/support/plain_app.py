"""The plainest ASGI application: it answers every request with the process
it runs in, the share of the cores it was given and its collector's state
(mcpapi.serving's workers, started for real). Once started it settles its
heap, as memoryhub's application does (mcpapi.serving.settle_heap)."""

from __future__ import annotations

import gc
import json
import os
from typing import Any

from mcpapi.serving import CORES_PER_PROCESS, settle_heap


async def app(scope: dict[str, Any], receive: Any, send: Any) -> None:
    if scope["type"] == "lifespan":
        while True:
            message = await receive()
            if message["type"] == "lifespan.startup":
                settle_heap()
                await send({"type": "lifespan.startup.complete"})
            elif message["type"] == "lifespan.shutdown":
                await send({"type": "lifespan.shutdown.complete"})
                return
    body = json.dumps({"pid": os.getpid(), "share": os.environ.get(CORES_PER_PROCESS),
                       "frozen": gc.get_freeze_count(), "young": gc.get_threshold()[0]}).encode()
    await send({"type": "http.response.start", "status": 200,
                "headers": [(b"content-type", b"application/json"), (b"connection", b"close")]})
    await send({"type": "http.response.body", "body": body})
