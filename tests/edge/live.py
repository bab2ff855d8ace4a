"""The edge topology, for real: a memory-service process, an edge process and,
between them, a recording proxy.

    test ──MCP──▶ edge (uvicorn mcpapi.edge_app, no DB, no secret, no Django)
                    │ token exchange + internal API
                    ▼
                  recorder (this process: forwards and keeps a copy of every request and answer)
                    ▼
                  memory service (uvicorn memoryhub.asgi, DATABASE_URL = the pytest-django test database)

The service's public origin (MEMORYHUB_BASE_URL) is the edge's URL, as it is
behind a real reverse proxy, so resource URLs match what the edge presents.
"""

from __future__ import annotations

import os
import tempfile
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx2

from tests.conftest import free_port
from tests.support.processes import (
    ROOT,
    Process,
    forget_redis_keys,
    service_environment,
    spawn_uvicorn,
    wait_healthy,
)
from tests.support.proxy import bind_localhost, serve_in_thread

# Connection-specific fields (RFC 9110 §7.6.1), never forwarded.
_HOP_BY_HOP = frozenset({"connection", "keep-alive", "te", "trailer", "transfer-encoding", "upgrade", "host",
                         "content-length"})


@dataclass(frozen=True)
class Seen:
    """One request that crossed from the edge to the memory service, and its answer."""

    method: str
    path: str
    headers: dict[str, str]
    body: bytes
    status: int
    answer: bytes


@dataclass
class Recorder:
    """ASGI app: forwards every request to `upstream` and keeps a copy."""

    upstream: str
    seen: list[Seen] = field(default_factory=list)
    _client: httpx2.AsyncClient | None = None

    async def __call__(self, scope: dict[str, Any], receive: Any, send: Any) -> None:
        if scope["type"] == "lifespan":
            while True:
                message = await receive()
                if message["type"] == "lifespan.startup":
                    self._client = httpx2.AsyncClient(base_url=self.upstream, timeout=120, trust_env=False)
                    await send({"type": "lifespan.startup.complete"})
                else:
                    if self._client is not None:
                        await self._client.aclose()
                    await send({"type": "lifespan.shutdown.complete"})
                    return
        assert self._client is not None
        body = b""
        while True:
            message = await receive()
            body += message.get("body", b"")
            if not message.get("more_body"):
                break
        headers = {k.decode("latin-1").lower(): v.decode("latin-1") for k, v in scope["headers"]}
        path = scope["path"] + (f"?{scope['query_string'].decode()}" if scope.get("query_string") else "")
        response = await self._client.request(
            scope["method"], path, content=body,
            headers={k: v for k, v in headers.items() if k not in _HOP_BY_HOP},
        )
        self.seen.append(Seen(scope["method"], scope["path"], headers, body, response.status_code, response.content))
        await send({
            "type": "http.response.start",
            "status": response.status_code,
            "headers": [(k.encode(), v.encode()) for k, v in response.headers.items() if k.lower() not in _HOP_BY_HOP]
            + [(b"content-length", str(len(response.content)).encode())],
        })
        await send({"type": "http.response.body", "body": response.content})


@contextmanager
def recording(upstream: str) -> Iterator[tuple[str, Recorder]]:
    recorder = Recorder(upstream=upstream)
    sock, url = bind_localhost()
    with serve_in_thread(recorder, sock, thread_name="edge-recorder"):
        yield url, recorder


def edge_environment(*, base_url: str, service_url: str, key_prefix: str) -> dict[str, str]:
    """Built from nothing, not copied from this process: what an edge host has."""
    return {
        "PATH": os.environ.get("PATH", "/usr/bin:/bin"),
        "HOME": os.environ.get("HOME", "/root"),
        "LANG": "C.UTF-8",
        "PYTHONPATH": str(ROOT),
        "MEMORYHUB_BASE_URL": base_url,
        "MEMORYHUB_SERVICE_URL": service_url,
        "REDIS_URL": os.environ.get("REDIS_URL") or "redis://127.0.0.1:6379/0",
        "MEMORYHUB_CACHE_PREFIX": key_prefix,
    }


@dataclass
class EdgeStack:
    edge_url: str
    service_url: str
    edge: Process
    service: Process
    recorder: Recorder
    key_prefix: str
    task_queue: str

    def mcp(self, endpoint: str = "/mcp") -> str:
        return self.edge_url + endpoint

    @property
    def audience(self) -> str:
        return self.edge_url + "/internal/memory"

    def exchanges(self) -> list[Seen]:
        return [seen for seen in self.recorder.seen if seen.path == "/o/token/exchange/"]

    def internal_calls(self) -> list[Seen]:
        return [seen for seen in self.recorder.seen if seen.path.startswith("/internal/")]


@contextmanager
def edge_stack(
    settings_dict: dict[str, Any],
    *,
    credential_seconds: float | None = None,
    gateway_env: dict[str, str] | None = None,
) -> Iterator[EdgeStack]:
    """Start the memory service, the recorder and the edge; stop all three after.

    `gateway_env` (MEMORYHUB_RATE_PER_MINUTE and the like) reaches both processes."""
    edge_port, service_port = free_port(), free_port()
    edge_url, service_url = f"http://127.0.0.1:{edge_port}", f"http://127.0.0.1:{service_port}"
    run = uuid.uuid4().hex[:10]
    key_prefix, task_queue = f"edge-test-{run}", f"edge-test-{run}"
    service_env = service_environment(
        settings_dict, base_url=edge_url, key_prefix=key_prefix, task_queue=task_queue,
        extra={"MEMORYHUB_INTERNAL_API": "1", **(gateway_env or {})},
    )
    if credential_seconds is not None:
        service_env["MEMORYHUB_EXCHANGED_TOKEN_SECONDS"] = str(credential_seconds)
    logs = Path(tempfile.mkdtemp(prefix="edge-stack-"))
    processes: list[Process] = []
    try:
        service = spawn_uvicorn("memory-service", "memoryhub.asgi:application", service_port, service_env, logs)
        processes.append(service)
        wait_healthy(service, service_url)
        with recording(service_url) as (recorder_url, recorder):
            edge = spawn_uvicorn(
                "edge", "mcpapi.edge_app:application", edge_port,
                {**edge_environment(base_url=edge_url, service_url=recorder_url, key_prefix=key_prefix),
                 **(gateway_env or {})}, logs,
            )
            processes.append(edge)
            wait_healthy(edge, edge_url)
            yield EdgeStack(edge_url=edge_url, service_url=service_url, edge=edge, service=service,
                            recorder=recorder, key_prefix=key_prefix, task_queue=task_queue)
    finally:
        for process in reversed(processes):
            process.stop()
        forget_redis_keys(key_prefix, task_queue)
