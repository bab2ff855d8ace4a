"""Personas and helpers for connected-source ingestion.

Workspace "acme":
  owner     olivia  engineering       reads runbooks and incidents
  outsider  oscar   sales             reads accounts only
  agent     triage-bot (assistant, engineering)
  source    wiki (connected source, default collection runbooks), with its credentials
  other     tickets (another connected source)
Collections: runbooks (engineering), incidents (engineering), accounts (sales).
"""

from __future__ import annotations

import base64
import os
import signal
import subprocess
import sys
import time
import uuid
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from urllib.parse import quote

import httpx2
import pytest

from memoryhub.access import Caller, caller_for_agent, caller_for_user
from memoryhub.models import Source, Tenant
from memoryhub.services import workspaces

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


@dataclass
class Acme:
    tenant: Tenant
    owner: Caller
    outsider: Caller
    agent: Caller
    wiki: Source
    wiki_client_id: str
    wiki_secret: str
    tickets: Source


def make_acme() -> Acme:
    tenant = workspaces.workspace_create(slug="acme", name="Acme")
    for name, roles in {"runbooks": ["engineering"], "incidents": ["engineering"], "accounts": ["sales"]}.items():
        workspaces.collection_create(tenant=tenant, name=name)
        for role in roles:
            workspaces.access_rule_grant(tenant=tenant, role=role, collection=name)
    olivia = workspaces.person_add(tenant=tenant, username="olivia", password=None, roles=["engineering"])
    oscar = workspaces.person_add(tenant=tenant, username="oscar", password=None, roles=["sales"])
    bot = workspaces.agent_register(tenant=tenant, name="triage-bot", scopes=["memory.read", "memory.write"],
                                    roles=["engineering"])
    wiki, wiki_credentials = workspaces.source_connect(tenant=tenant, name="wiki", collection="runbooks")
    tickets, _ = workspaces.source_connect(tenant=tenant, name="tickets", collection="incidents")
    return Acme(
        tenant=tenant,
        owner=caller_for_user(user=olivia),
        outsider=caller_for_user(user=oscar),
        agent=caller_for_agent(agent=bot.agent, client_id=bot.client_id),
        wiki=wiki,
        wiki_client_id=wiki_credentials.client_id,
        wiki_secret=wiki_credentials.client_secret,
        tickets=tickets,
    )


@pytest.fixture
def acme(db) -> Acme:
    return make_acme()


@pytest.fixture
def live_acme(transactional_db) -> Acme:
    return make_acme()


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
def wiki_api(asgi_server, live_acme) -> IngestClient:
    """The wiki source's connector, with a real token from /o/token/."""
    response = client_credentials_token(asgi_server.url, live_acme.wiki_client_id, live_acme.wiki_secret)
    assert response.status_code == 200, response.text
    body = response.json()
    assert body["scope"] == "ingest"
    return IngestClient(base_url=asgi_server.url, token=body["access_token"])


def doc(resource_id: str = "handbook/oncall.md", text: str = "The on-call rotation changes every Monday.",
        **fields) -> dict:  # type: ignore[no-untyped-def]
    return {"resource_id": resource_id, "title": "On-call", "uri": f"https://wiki.example.com/{resource_id}",
            "created_at": "2026-03-01T09:00:00Z", "text": text, **fields}


# ---------------------------------------------------------------- real Celery workers


def database_url() -> str:
    """The test database, as a URL a worker process can be pointed at."""
    from django.db import connection

    settings_dict = connection.settings_dict
    host = quote(settings_dict["HOST"], safe="")
    port = f":{settings_dict['PORT']}" if settings_dict.get("PORT") else ""
    password = f":{quote(settings_dict['PASSWORD'])}" if settings_dict.get("PASSWORD") else ""
    return f"postgresql://{quote(settings_dict['USER'])}{password}@{host}{port}/{settings_dict['NAME']}"


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
        if self.process.poll() is None:
            self.process.send_signal(signal.SIGTERM)
            try:
                self.process.wait(30)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait(10)


@pytest.fixture
def start_worker(transactional_db, private_task_queue, tmp_path) -> Iterator[Callable[..., Worker]]:
    """Start real Celery workers (solo pool: the task runs in the process we
    may kill) on this run's queue, against the test database."""
    started: list[Worker] = []

    def start(name: str = "w1", *, visibility_timeout: int | None = None) -> Worker:
        env = {**os.environ, "DATABASE_URL": database_url(), "MEMORYHUB_TASK_QUEUE": private_task_queue,
               "LOG_LEVEL": "INFO"}
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


def wait_for(condition: Callable[[], object], *, timeout: float = 240, interval: float = 0.05,
             message: str = "condition") -> object:
    """Poll until `condition()` is truthy. The timeout only stops a broken run
    from hanging; nothing asserts how fast it happens."""
    deadline = time.monotonic() + timeout
    while True:
        value = condition()
        if value:
            return value
        if time.monotonic() > deadline:
            raise AssertionError(f"gave up waiting for {message}")
        time.sleep(interval)
