"""Request bodies on every Django path: a size cap enforced while reading, and
a deadline.

Django's ASGI handler reads a whole body (spooling it to disk past 2.5 MB)
before any view can refuse it, so a 16 MiB chunked body to the 16 KiB
registration endpoint was read to the end. `BodyGuard` sits in front of Django
(the MCP endpoint has the same rules in its gateway): a declared length over
the path's cap is refused with 413 before a byte is read, a body that grows
past it is refused with 413 as soon as it does (the rest is never read), and a
body that does not arrive within its deadline (MEMORYHUB_BODY_TIMEOUT_SECONDS, read
once by mcpapi.serving and passed in by the wiring) gets 408.
"""

from __future__ import annotations

import json
import logging
from collections.abc import MutableMapping
from typing import Any

import anyio

logger = logging.getLogger("memoryhub.bodies")

KIB = 1024


def caps() -> tuple[tuple[str, int], ...]:
    """path prefix -> the most a request body there may be (the first match
    wins); the numbers are the endpoints' own, which they also check."""
    from memoryhub.api.admin import BODY_MAX_BYTES as ADMIN_BODY_MAX_BYTES
    from memoryhub.api.views import BODY_MAX_BYTES
    from memoryhub.mcp_adapter.internal_api import MAX_BODY_BYTES
    from memoryhub.oauth.views import MAX_REGISTRATION_BYTES

    return (
        ("/o/register", MAX_REGISTRATION_BYTES),  # a client's registration document
        ("/o/", 64 * KIB),  # token, exchange, revocation, consent forms
        ("/api/admin/", ADMIN_BODY_MAX_BYTES),  # the REST admin API: names and lists of roles
        ("/api/", BODY_MAX_BYTES),  # ingestion: a document of up to 256 Ki characters
        ("/internal/", MAX_BODY_BYTES),  # the edge's tool calls: what the MCP gateway already admitted
        ("/", 512 * KIB),  # pages' forms: an edited fact of 32 Ki characters, percent-encoded
    )


def cap_for(path: str, table: tuple[tuple[str, int], ...]) -> int:
    """The cap of the first prefix `path` starts with; a target that is no path
    at all (the asterisk form, "OPTIONS * HTTP/1.1") gets the smallest."""
    return next((cap for prefix, cap in table if path.startswith(prefix)), min(cap for _, cap in table))


class BodyGuard:
    def __init__(self, app: Any, *, timeout: float) -> None:
        self.app = app
        self.timeout = timeout
        self.caps = caps()

    async def __call__(self, scope: MutableMapping[str, Any], receive: Any, send: Any) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        path = scope.get("path", "/")
        cap = cap_for(path, self.caps)
        if _declared_length(scope) > cap:
            await _refuse(send, path, 413, f"The request body is larger than {cap} bytes.")
            return
        try:
            with anyio.fail_after(self.timeout):
                body, disconnected = await _read(receive, cap)
        except TimeoutError:
            logger.warning("request body for %s did not arrive within %g s", path, self.timeout)
            await _refuse(send, path, 408, "The request body did not arrive in time; send it again.")
            return
        if body is None:
            await _refuse(send, path, 413, f"The request body is larger than {cap} bytes.")
            return
        if disconnected:
            return

        delivered = False

        async def replay() -> dict:
            nonlocal delivered
            if not delivered:
                delivered = True
                return {"type": "http.request", "body": body, "more_body": False}
            return await receive()

        await self.app(scope, replay, send)


def _declared_length(scope: MutableMapping[str, Any]) -> int:
    for name, value in scope.get("headers", []):
        if name == b"content-length":
            try:
                return int(value)
            except ValueError:
                return 0
    return 0


async def _read(receive: Any, cap: int) -> tuple[bytes | None, bool]:
    """(the body, or None once it grows past `cap`; whether the client went away)."""
    chunks: list[bytes] = []
    size = 0
    while True:
        message = await receive()
        if message["type"] == "http.disconnect":
            return b"".join(chunks), True
        chunk = message.get("body", b"")
        size += len(chunk)
        if size > cap:
            return None, False
        chunks.append(chunk)
        if not message.get("more_body", False):
            return b"".join(chunks), False


async def _refuse(send: Any, path: str, status: int, message: str) -> None:
    body: dict[str, Any] | None
    if path.startswith(("/o/", "/.well-known/")):
        body = {"error": "invalid_request", "error_description": message}
    elif path.startswith(("/api/", "/internal/")):
        body = {"error": {"code": "request_too_large" if status == 413 else "request_timeout", "message": message}}
    else:
        body = None
    content = json.dumps(body).encode() if body is not None else message.encode()
    content_type = b"application/json" if body is not None else b"text/plain; charset=utf-8"
    await send({"type": "http.response.start", "status": status, "headers": [
        (b"content-type", content_type), (b"content-length", str(len(content)).encode()), (b"connection", b"close"),
    ]})
    await send({"type": "http.response.body", "body": content})
