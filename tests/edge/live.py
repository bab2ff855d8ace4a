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
import signal
import subprocess
import sys
import tempfile
import threading
import time
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any
from urllib.parse import quote, urlencode

import httpx2
import uvicorn

from tests.conftest import free_port

ROOT = Path(__file__).resolve().parents[2]
STARTUP_SECONDS = 180
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
    port = free_port()
    server = uvicorn.Server(uvicorn.Config(recorder, host="127.0.0.1", port=port, log_level="warning",
                                           lifespan="on"))
    thread = threading.Thread(target=server.run, daemon=True, name="edge-recorder")
    thread.start()
    deadline = time.monotonic() + 30
    while not server.started:
        if time.monotonic() > deadline or not thread.is_alive():
            raise RuntimeError("the recorder did not start")
        time.sleep(0.02)
    try:
        yield f"http://127.0.0.1:{port}", recorder
    finally:
        server.should_exit = True
        thread.join(15)


def database_url(settings_dict: dict[str, Any]) -> str:
    """A DATABASE_URL (memoryhub.settings' format) for the database Django is connected to."""
    query = {"host": settings_dict["HOST"]} if settings_dict["HOST"] else {}
    if settings_dict.get("PORT"):
        query["port"] = str(settings_dict["PORT"])
    user = quote(settings_dict["USER"] or "", safe="")
    password = f":{quote(settings_dict['PASSWORD'], safe='')}" if settings_dict.get("PASSWORD") else ""
    return f"postgresql://{user}{password}@/{quote(settings_dict['NAME'], safe='')}?{urlencode(query)}"


@dataclass
class Process:
    name: str
    popen: subprocess.Popen
    log: Path

    @property
    def pid(self) -> int:
        return self.popen.pid

    def environment(self) -> dict[str, str]:
        """The process's real environment, as the kernel holds it."""
        raw = Path(f"/proc/{self.pid}/environ").read_bytes()
        pairs = (item.split(b"=", 1) for item in raw.split(b"\0") if b"=" in item)
        return {key.decode(): value.decode(errors="replace") for key, value in pairs}

    def output(self) -> str:
        return self.log.read_text(errors="replace")[-4000:]

    def stop(self) -> None:
        if self.popen.poll() is None:
            self.popen.send_signal(signal.SIGTERM)
            try:
                self.popen.wait(20)
            except subprocess.TimeoutExpired:
                self.popen.kill()
                self.popen.wait(10)


def _spawn(name: str, target: str, port: int, env: dict[str, str], logs: Path) -> Process:
    log = logs / f"{name}.log"
    with open(log, "wb") as out:
        popen = subprocess.Popen(
            [sys.executable, "-m", "uvicorn", target, "--host", "127.0.0.1", "--port", str(port),
             "--lifespan", "on", "--log-level", "warning", "--no-access-log"],
            cwd=ROOT, env=env, stdout=out, stderr=subprocess.STDOUT,
        )
    return Process(name=name, popen=popen, log=log)


def _wait_healthy(process: Process, url: str) -> None:
    deadline = time.monotonic() + STARTUP_SECONDS
    while time.monotonic() < deadline:
        if process.popen.poll() is not None:
            raise RuntimeError(f"{process.name} exited with {process.popen.returncode}:\n{process.output()}")
        try:
            if httpx2.get(f"{url}/healthz", timeout=2, trust_env=False).status_code == 200:
                return
        except httpx2.HTTPError:
            pass
        time.sleep(0.1)
    raise RuntimeError(f"{process.name} did not become healthy:\n{process.output()}")


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
def edge_stack(settings_dict: dict[str, Any], *, credential_seconds: float | None = None) -> Iterator[EdgeStack]:
    """Start the memory service, the recorder and the edge; stop all three after."""
    edge_port, service_port = free_port(), free_port()
    edge_url, service_url = f"http://127.0.0.1:{edge_port}", f"http://127.0.0.1:{service_port}"
    run = uuid.uuid4().hex[:10]
    key_prefix, task_queue = f"edge-test-{run}", f"edge-test-{run}"
    service_env = {
        **{key: value for key, value in os.environ.items() if not key.startswith("PYTEST")},
        "DJANGO_SETTINGS_MODULE": "memoryhub.settings",
        "DATABASE_URL": database_url(settings_dict),
        "MEMORYHUB_BASE_URL": edge_url,
        "MEMORYHUB_INTERNAL_API": "1",
        "MEMORYHUB_CACHE_PREFIX": key_prefix,
        # Nobody consumes this queue: enrichment is not what these tests are about.
        "MEMORYHUB_TASK_QUEUE": task_queue,
        "LOG_LEVEL": "WARNING",
        "PYTHONPATH": str(ROOT),
    }
    if credential_seconds is not None:
        service_env["MEMORYHUB_EXCHANGED_TOKEN_SECONDS"] = str(credential_seconds)
    logs = Path(tempfile.mkdtemp(prefix="edge-stack-"))
    processes: list[Process] = []
    try:
        service = _spawn("memory-service", "memoryhub.asgi:application", service_port, service_env, logs)
        processes.append(service)
        _wait_healthy(service, service_url)
        with recording(service_url) as (recorder_url, recorder):
            edge = _spawn(
                "edge", "mcpapi.edge_app:application", edge_port,
                edge_environment(base_url=edge_url, service_url=recorder_url, key_prefix=key_prefix), logs,
            )
            processes.append(edge)
            _wait_healthy(edge, edge_url)
            yield EdgeStack(edge_url=edge_url, service_url=service_url, edge=edge, service=service,
                            recorder=recorder, key_prefix=key_prefix, task_queue=task_queue)
    finally:
        for process in reversed(processes):
            process.stop()
        _forget_redis_keys(key_prefix, task_queue)


def _forget_redis_keys(key_prefix: str, task_queue: str) -> None:
    import redis

    client = redis.Redis.from_url(os.environ.get("REDIS_URL") or "redis://127.0.0.1:6379/0")
    try:
        for key in client.scan_iter(f"*{key_prefix}*"):
            client.delete(key)
        client.delete(task_queue)
    finally:
        client.close()
