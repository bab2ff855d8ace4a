"""Real server processes for tests: uvicorn in a child process, on the test database."""

from __future__ import annotations

import os
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any
from urllib.parse import quote, urlencode

import httpx2

from memoryhub.runtime.children import stop_child
from tests.conftest import poll

ROOT = Path(__file__).resolve().parents[2]
STARTUP_SECONDS = 180


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
        stop_child(self.popen, grace=20, group=True)


def spawn_uvicorn(name: str, target: str, port: int, env: dict[str, str], logs: Path, *,
                  workers: int | None = 1) -> Process:
    """The server every memoryhub process runs under (deadlines for slow
    clients), with one worker unless asked (None: its own default)."""
    log = logs / f"{name}.log"
    with open(log, "wb") as out:
        popen = subprocess.Popen(
            [sys.executable, "-m", "mcpapi.serving", target, "--host", "127.0.0.1", "--port", str(port),
             *(["--workers", str(workers)] if workers is not None else [])],
            cwd=ROOT, env={"LOG_LEVEL": "WARNING", **env}, stdout=out, stderr=subprocess.STDOUT,
            # Its own process group: stopping it stops its worker processes too, even killed.
            start_new_session=True,
        )
    return Process(name=name, popen=popen, log=log)


def wait_healthy(process: Process, url: str) -> None:
    def healthy() -> bool:
        if process.popen.poll() is not None:
            raise RuntimeError(f"{process.name} exited with {process.popen.returncode}:\n{process.output()}")
        try:
            return httpx2.get(f"{url}/healthz", timeout=2, trust_env=False).status_code == 200
        except httpx2.HTTPError:
            return False

    try:
        poll(healthy, timeout=STARTUP_SECONDS, interval=0.1, what=f"{process.name} to become healthy")
    except AssertionError:
        raise RuntimeError(f"{process.name} did not become healthy:\n{process.output()}") from None


def service_environment(
    settings_dict: dict[str, Any], *, base_url: str, key_prefix: str, task_queue: str,
    extra: dict[str, str] | None = None,
) -> dict[str, str]:
    """The environment of a memory-service process (memoryhub.asgi) on the test database.

    `base_url` is its public origin: resource URLs and the issuer are built from it.
    Enrichment tasks go to `task_queue`, which nobody consumes."""
    return {
        **{key: value for key, value in os.environ.items() if not key.startswith("PYTEST")},
        "DJANGO_SETTINGS_MODULE": "memoryhub.settings",
        "DATABASE_URL": database_url(settings_dict),
        "MEMORYHUB_BASE_URL": base_url,
        "MEMORYHUB_CACHE_PREFIX": key_prefix,
        "MEMORYHUB_TASK_QUEUE": task_queue,
        "LOG_LEVEL": "WARNING",
        "PYTHONPATH": str(ROOT),
        **(extra or {}),
    }


def forget_redis_keys(key_prefix: str, task_queue: str) -> None:
    """Delete what a process started with `service_environment` left in Redis."""
    import redis

    client = redis.Redis.from_url(os.environ.get("REDIS_URL") or "redis://127.0.0.1:6379/0")
    try:
        for key in client.scan_iter(f"*{key_prefix}*"):
            client.delete(key)
        client.delete(task_queue)
    finally:
        client.close()
