"""Helpers for connected-source ingestion.

The personas are the root set (tests/conftest.py). In workspace "acme":
bruno (engineering) reads runbooks and incidents; carol (sales) reads
accounts only; triage-bot is an assistant agent (engineering); wiki is a
connected source feeding runbooks (its credentials: `people.wiki_credentials`)
and tickets another one feeding incidents.
"""

from __future__ import annotations

import base64
import os
import signal
import subprocess
import sys
import uuid
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from urllib.parse import quote

import httpx2
import pytest
from django.db import connection

from memoryhub.runtime.children import stop_child
from memoryhub.services.search import SearchResult, fragments_search
from tests.support.processes import database_url

ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture(scope="session")
def private_task_queue() -> Iterator[str]:
    """A queue of this run's own, which only the workers these tests start
    consume; dropped at the end."""
    from django.conf import settings

    queue = f"ingest-test-{uuid.uuid4().hex[:12]}"
    yield queue
    import redis

    broker = redis.Redis.from_url(settings.CELERY_BROKER_URL)
    broker.delete(queue, *broker.keys(f"_kombu.binding*.{queue}"))


@pytest.fixture(autouse=True)
def tasks_to_private_queue(private_task_queue) -> Iterator[None]:
    """While an ingestion test runs, what it enqueues goes to the private queue."""
    from memoryhub.celery import app

    previous = app.conf.task_default_queue
    app.conf.task_default_queue = private_task_queue
    yield
    app.conf.task_default_queue = previous


def search(people, who, query: str, **kwargs) -> SearchResult:  # type: ignore[no-untyped-def]
    """memory_search as `who` (a person or an agent of the root set)."""
    return fragments_search(caller=people.caller(who), query=query, **kwargs)


def values(result: SearchResult) -> list[str]:
    return [hit.fragment.value for hit in result.hits]


# ---------------------------------------------------------------- HTTP


def client_credentials_token(base_url: str, client_id: str, secret: str, **extra: str) -> httpx2.Response:
    basic = base64.b64encode(f"{client_id}:{secret}".encode()).decode()
    return httpx2.post(f"{base_url}/o/token/", data={"grant_type": "client_credentials", **extra},
                       headers={"Authorization": f"Basic {basic}"}, timeout=30)


@dataclass
class IngestClient:
    """The ingestion API as a connector sees it."""

    base_url: str
    token: str

    def _headers(self, token: str | None) -> dict[str, str]:
        token = self.token if token is None else token
        return {"Authorization": f"Bearer {token}"} if token else {}

    def upsert(self, body, *, token: str | None = None, **kwargs) -> httpx2.Response:  # type: ignore[no-untyped-def]
        return httpx2.post(f"{self.base_url}/api/ingest/documents", json=body, headers=self._headers(token),
                           timeout=60, **kwargs)

    def post_raw(self, content: bytes, content_type: str = "application/json", *,
                 token: str | None = None) -> httpx2.Response:
        return httpx2.post(f"{self.base_url}/api/ingest/documents", content=content, timeout=60,
                           headers={**self._headers(token), "Content-Type": content_type})

    def delete(self, resource_id: str, *, token: str | None = None) -> httpx2.Response:
        return httpx2.delete(f"{self.base_url}/api/ingest/documents/{quote(resource_id, safe='/')}",
                             headers=self._headers(token), timeout=60)

    def get(self, resource_id: str) -> httpx2.Response:
        return httpx2.get(f"{self.base_url}/api/ingest/documents/{quote(resource_id, safe='/')}",
                          headers=self._headers(None), timeout=60)

    def progress(self, *, token: str | None = None) -> httpx2.Response:
        return httpx2.get(f"{self.base_url}/api/ingest/status", headers=self._headers(token), timeout=60)


@pytest.fixture
def wiki_api(asgi_server, live_people) -> IngestClient:
    """The wiki source's connector, with a real token from /o/token/."""
    credentials = live_people.wiki_credentials
    response = client_credentials_token(asgi_server.url, credentials.client_id, credentials.client_secret)
    assert response.status_code == 200, response.text
    body = response.json()
    assert body["scope"] == "ingest"
    return IngestClient(base_url=asgi_server.url, token=body["access_token"])


def doc(resource_id: str = "handbook/oncall.md", text: str = "The on-call rotation changes every Monday.",
        **fields) -> dict:  # type: ignore[no-untyped-def]
    return {"resource_id": resource_id, "title": "On-call", "uri": f"https://wiki.example.com/{resource_id}",
            "created_at": "2026-03-01T09:00:00Z", "text": text, **fields}


# ---------------------------------------------------------------- real Celery workers


@dataclass
class Worker:
    process: subprocess.Popen
    log: Path

    def output(self) -> str:
        return self.log.read_text(errors="replace")

    def kill(self) -> None:
        self.process.send_signal(signal.SIGKILL)
        self.process.wait(30)

    def stop(self) -> None:
        stop_child(self.process)


@pytest.fixture
def start_worker(transactional_db, private_task_queue, tmp_path) -> Iterator[Callable[..., Worker]]:
    """Start real Celery workers (solo pool: the task runs in the process we
    may kill) on this run's queue, against the test database."""
    started: list[Worker] = []

    def start(name: str = "w1", *, visibility_timeout: int | None = None) -> Worker:
        env = {**os.environ, "DATABASE_URL": database_url(connection.settings_dict),
               "MEMORYHUB_TASK_QUEUE": private_task_queue, "LOG_LEVEL": "INFO"}
        if visibility_timeout is not None:
            env["CELERY_VISIBILITY_TIMEOUT"] = str(visibility_timeout)
        log = tmp_path / f"worker-{name}.log"
        with log.open("wb") as out:
            process = subprocess.Popen(
                [sys.executable, "-m", "celery", "-A", "memoryhub", "worker", "--pool", "solo", "--queues",
                 private_task_queue, "--hostname", f"{name}-{uuid.uuid4().hex[:6]}@%h", "--without-mingle",
                 "--without-gossip", "--without-heartbeat", "--loglevel", "INFO"],
                env=env, cwd=ROOT, stdout=out, stderr=subprocess.STDOUT,
            )
        worker = Worker(process=process, log=log)
        started.append(worker)
        return worker

    yield start
    for worker in started:
        worker.stop()
