"""A reverse proxy for tests that adds `Authorization: Bearer <token>` to every request.

Clients that cannot send a bearer token (the official MCP conformance suite, for
one) talk to this proxy; it forwards every request unchanged to the real server,
with the token added. Authentication stays on in the server under test: the
proxy is a client-side credential, not a server setting.

Forwarding is transparent on purpose: method, path, query, body and every
header, the client's `Host` and `Origin` included, reach the server as sent, so
the server's own Host/Origin policy is what gets tested. One translation:
the proxy stands in for the server, so a `Host` or `Origin` naming the proxy
itself is rewritten to name the server (what the client would have sent had it
reached the server directly); any other value (`evil.example.com`) passes
untouched. An `Authorization` header from the client is replaced. Responses
stream back as they arrive.
"""

from __future__ import annotations

import logging
import socket
import threading
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any

import httpx2
import uvicorn

from tests.conftest import poll

_THREAD_NAME = "bearer-proxy"


class _NotFromTheProxy(logging.Filter):
    """httpx2 logs every request at INFO; the proxy's would bury a failing test's output."""

    def filter(self, record: logging.LogRecord) -> bool:
        return record.threadName != _THREAD_NAME


logging.getLogger("httpx2").addFilter(_NotFromTheProxy())

# RFC 9110 section 7.6.1 connection-specific fields; never forwarded either way.
_HOP_BY_HOP = frozenset(
    {
        b"connection",
        b"keep-alive",
        b"proxy-authenticate",
        b"proxy-authorization",
        b"proxy-connection",
        b"te",
        b"trailer",
        b"transfer-encoding",
        b"upgrade",
    }
)


class BearerProxy:
    """ASGI app: forwards everything to `upstream` (scheme://host:port) with a bearer token."""

    def __init__(
        self, upstream: str, token: str | Callable[[], str], *, public: str | None = None, timeout: float = 60.0
    ) -> None:
        self._upstream = upstream.rstrip("/")
        # (what the client sends, what the server expects) for Host and Origin.
        self._aliases: dict[bytes, tuple[bytes, bytes]] = {}
        if public is not None:
            mine, theirs = httpx2.URL(public), httpx2.URL(self._upstream)
            self._aliases = {
                b"host": (_authority(mine), _authority(theirs)),
                b"origin": (_origin(mine), _origin(theirs)),
            }
        self._token = token
        self._timeout = timeout
        self._client: httpx2.AsyncClient | None = None

    async def __call__(self, scope: dict[str, Any], receive: Any, send: Any) -> None:
        if scope["type"] == "lifespan":
            await self._lifespan(receive, send)
            return
        if scope["type"] != "http":
            return
        await self._forward(scope, receive, send)

    async def _lifespan(self, receive: Any, send: Any) -> None:
        while True:
            message = await receive()
            if message["type"] == "lifespan.startup":
                self._client = httpx2.AsyncClient(
                    timeout=httpx2.Timeout(self._timeout), follow_redirects=False, trust_env=False
                )
                await send({"type": "lifespan.startup.complete"})
            elif message["type"] == "lifespan.shutdown":
                if self._client is not None:
                    await self._client.aclose()
                await send({"type": "lifespan.shutdown.complete"})
                return

    def _bearer(self) -> str:
        token = self._token() if callable(self._token) else self._token
        return f"Bearer {token}"

    async def _forward(self, scope: dict[str, Any], receive: Any, send: Any) -> None:
        assert self._client is not None, "the proxy runs with lifespan='on'"
        body = bytearray()
        while True:
            message = await receive()
            if message["type"] != "http.request":
                return  # the client went away
            body += message.get("body", b"")
            if not message.get("more_body", False):
                break
        headers: list[tuple[bytes, bytes]] = []
        for name, value in scope["headers"]:
            lowered = name.lower()
            if lowered in _HOP_BY_HOP or lowered in (b"authorization", b"content-length"):
                continue
            alias = self._aliases.get(lowered)
            if alias is not None and value.lower() == alias[0]:
                value = alias[1]
            headers.append((name, value))
        headers.append((b"authorization", self._bearer().encode()))
        target = self._upstream + scope.get("raw_path", scope["path"].encode()).decode("latin-1")
        if scope.get("query_string"):
            target += "?" + scope["query_string"].decode("latin-1")
        request = self._client.build_request(scope["method"], target, headers=headers, content=bytes(body))
        try:
            response = await self._client.send(request, stream=True)
        except httpx2.HTTPError as exc:
            payload = f"proxy: upstream unreachable: {type(exc).__name__}".encode()
            await send(
                {
                    "type": "http.response.start",
                    "status": 502,
                    "headers": [(b"content-type", b"text/plain"), (b"content-length", str(len(payload)).encode())],
                }
            )
            await send({"type": "http.response.body", "body": payload})
            return
        try:
            await send(
                {
                    "type": "http.response.start",
                    "status": response.status_code,
                    "headers": [
                        (name, value) for name, value in response.headers.raw if name.lower() not in _HOP_BY_HOP
                    ],
                }
            )
            async for chunk in response.aiter_raw():
                await send({"type": "http.response.body", "body": chunk, "more_body": True})
            await send({"type": "http.response.body", "body": b"", "more_body": False})
        finally:
            await response.aclose()


def _authority(url: httpx2.URL) -> bytes:
    return url.netloc.lower()


def _origin(url: httpx2.URL) -> bytes:
    return url.scheme.encode() + b"://" + url.netloc.lower()


def bind_localhost() -> tuple[socket.socket, str]:
    """A listening-ready socket on 127.0.0.1 with a free port, and its base URL."""
    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    sock.bind(("127.0.0.1", 0))
    return sock, f"http://127.0.0.1:{sock.getsockname()[1]}"


@contextmanager
def serve_in_thread(
    app: Any, sock: socket.socket, *, thread_name: str = "asgi-server", **config: Any
) -> Iterator[uvicorn.Server]:
    """Runs `app` under uvicorn (lifespan on) on `sock` in a daemon thread until the block ends."""
    server = uvicorn.Server(
        uvicorn.Config(app, lifespan="on", log_level="warning", timeout_graceful_shutdown=2, **config)
    )
    thread = threading.Thread(target=server.run, kwargs={"sockets": [sock]}, daemon=True, name=thread_name)
    thread.start()
    try:
        poll(lambda: server.started or not thread.is_alive(), timeout=15, interval=0.02, what="uvicorn to start")
        if not server.started:
            raise RuntimeError("uvicorn did not start")
        yield server
    finally:
        server.should_exit = True
        thread.join(10)
        sock.close()


@contextmanager
def bearer_proxy(upstream: str, token: str | Callable[[], str]) -> Iterator[str]:
    """Serves a `BearerProxy` for `upstream` on 127.0.0.1 in a thread; yields the proxy's base URL."""
    sock, public = bind_localhost()
    app = BearerProxy(upstream, token, public=public)
    # No Server/Date headers of its own: the upstream's pass through.
    with serve_in_thread(
        app, sock, thread_name=_THREAD_NAME, proxy_headers=False, server_header=False, date_header=False
    ):
        yield public
