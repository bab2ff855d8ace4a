"""A whole memoryhub on loopback, in processes of its own, under load while one
fault at a time strikes it; used by tests/faults/ (correctness) and
bench/soak.py (figures).

The stack: the data folder's own PostgreSQL and Redis (memoryhub.runtime.
embedded), the ASGI server (`python -m mcpapi.serving`), a Celery worker with
the beat (the sweep every few seconds). The load: people and agents calling
`memory_write` and `memory_search` over MCP with real tokens, each write with
its own idempotency key and retried with it until it gets an answer. Every
answer is logged, so the checks can count: every write answered as done is
present exactly once, every fragment ends embedded, no answer is a 500 and
none waits past the tool deadline.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import textwrap
import threading
import time
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx2
import psycopg

from memoryhub.runtime import embedded
from memoryhub.runtime.children import stop_child
from memoryhub.runtime.leaks import leftover_processes
from tests.conftest import free_port

ROOT = Path(__file__).resolve().parents[2]
TOOL_DEADLINE = 25.0
MODERN = "2026-07-28"
META = {"io.modelcontextprotocol/protocolVersion": MODERN, "io.modelcontextprotocol/clientCapabilities": {},
        "io.modelcontextprotocol/clientInfo": {"name": "fault-harness", "version": "0"}}

SEED = textwrap.dedent("""
    import json, secrets
    from datetime import timedelta
    from django.utils import timezone
    from oauth2_provider.models import AccessToken, Application, set_token_value
    from memoryhub import access
    from memoryhub.services import agents, members, roles, workspaces
    tenant = workspaces.workspace_create(caller=access.OPERATOR, slug="faults", exist_ok=True)
    system = access.system_caller(tenant=tenant)
    roles.role_create(caller=system, name="engineering", exist_ok=True)
    app = Application.objects.create(name="fault-load", client_type=Application.CLIENT_PUBLIC,
        authorization_grant_type=Application.GRANT_AUTHORIZATION_CODE, redirect_uris="http://127.0.0.1:9/cb")
    def token(user, application, scope):
        raw = secrets.token_urlsafe(24)
        row = AccessToken(application=application, user=user, scope=scope, resource=[BASE + "/mcp"],
                          expires=timezone.now() + timedelta(hours=2))
        set_token_value(row, raw)
        row.save()
        return raw
    out = []
    for n in range(PEOPLE):
        user = members.member_add(caller=system, username=f"p{n}", password=None, roles=["engineering"])
        out.append({"kind": "user", "name": f"p{n}", "token": token(user, app, "memory.read memory.write")})
    for n in range(AGENTS):
        creds = agents.agent_register(caller=system, name=f"a{n}", scopes=["memory.read", "memory.write"],
                                      roles=["engineering"])
        out.append({"kind": "agent", "name": f"a{n}",
                    "token": token(None, creds.agent.application, "memory.read memory.write")})
    from memoryhub.services import collections as collections_service
    from memoryhub.services import access_rules, sources
    collections_service.collection_create(caller=system, name="runbooks", exist_ok=True)
    access_rules.access_rule_grant(caller=system, role="engineering", collection="runbooks", exist_ok=True)
    source, credentials = sources.source_register(caller=system, name="wiki", collection="runbooks")
    raw = secrets.token_urlsafe(24)
    row = AccessToken(application=credentials.agent.application, user=None, scope="ingest", resource=[],
                      expires=timezone.now() + timedelta(hours=2))
    set_token_value(row, raw)
    row.save()
    out.append({"kind": "source", "name": "wiki", "token": raw})
    print("TOKENS " + json.dumps(out))
""")


@dataclass
class Stack:
    datadir: Path
    port: int = field(default_factory=free_port)
    web: subprocess.Popen | None = None
    worker: subprocess.Popen | None = None
    clients: list[dict[str, str]] = field(default_factory=list)

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    @property
    def postgres(self) -> embedded.EmbeddedPostgres:
        return embedded.EmbeddedPostgres(self.datadir)

    @property
    def redis(self) -> embedded.EmbeddedRedis:
        return embedded.EmbeddedRedis(self.datadir)

    def env(self) -> dict[str, str]:
        env = {k: v for k, v in os.environ.items()
               if k not in ("DATABASE_URL", "REDIS_URL", "DATABASE_TEST_NAME", "PROMETHEUS_MULTIPROC_DIR")}
        env.update(MEMORYHUB_DATA_DIR=str(self.datadir), MEMORYHUB_BASE_URL=self.url, LOG_LEVEL="WARNING",
                   MEMORYHUB_RATE_PER_MINUTE="100000", MEMORYHUB_RATE_BURST="10000", MEMORYHUB_SWEEP_SECONDS="5",
                   MEMORYHUB_TASK_QUEUE="faults", MEMORYHUB_LOG_FORMAT="plain")
        return env

    def _log(self, name: str):  # type: ignore[no-untyped-def]
        return open(self.datadir / f"{name}.log", "ab")  # noqa: SIM115 - handed to the child process

    # ------------------------------------------------------------------ lifecycle

    def start(self, *, people: int = 3, agents: int = 1) -> None:
        self.datadir.mkdir(parents=True, exist_ok=True)
        embedded.use(self.postgres)
        embedded.use(self.redis)
        manage = [sys.executable, "manage.py"]
        for step in (["migrate", "--noinput"], ["prepare_embedder"]):
            subprocess.run([*manage, *step], cwd=ROOT, env=self.env(), check=True, capture_output=True, timeout=600)
        script = f"BASE = {self.url!r}\nPEOPLE = {people}\nAGENTS = {agents}\n" + SEED
        seeded = subprocess.run([*manage, "shell", "-c", script], cwd=ROOT, env=self.env(), check=True,
                                capture_output=True, text=True, timeout=300)
        line = next(line for line in seeded.stdout.splitlines() if line.startswith("TOKENS "))
        self.clients = json.loads(line[len("TOKENS "):])
        self.start_web()
        self.start_worker()

    def stop(self) -> None:
        stop_child(self.web)
        stop_child(self.worker, group=True)
        self.web = self.worker = None
        embedded.release(self.redis)
        embedded.release(self.postgres)
        # Nothing of the stack may outlive it: not a worker's beat or pool, orphaned by a SIGKILL.
        leftovers = leftover_processes(self.datadir)
        assert leftovers == [], leftovers

    def start_web(self) -> None:
        self.web = subprocess.Popen(
            [sys.executable, "-m", "mcpapi.serving", "memoryhub.asgi:application", "--port", str(self.port),
             "--workers", "1"], cwd=ROOT, env=self.env(), stdout=self._log("web"), stderr=subprocess.STDOUT)
        self.wait_healthy()

    def wait_healthy(self, timeout: float = 120) -> None:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            try:
                if httpx2.get(f"{self.url}/healthz", timeout=2, trust_env=False).status_code == 200:
                    return
            except httpx2.HTTPError:
                pass
            time.sleep(0.2)
        raise RuntimeError("the web process did not come up:\n" + (self.datadir / "web.log").read_text()[-3000:])

    def start_worker(self) -> None:
        self.worker = subprocess.Popen(
            [sys.executable, "-m", "celery", "-A", "memoryhub", "worker", "--beat", "--schedule",
             str(self.datadir / "celerybeat-schedule"), "--pool", "solo", "--queues", "faults",
             "--without-mingle", "--without-gossip", "--loglevel", "WARNING"],
            cwd=ROOT, env=self.env(), stdout=self._log("worker"), stderr=subprocess.STDOUT,
            start_new_session=True)  # a group of its own: its beat and pool go with it

    # ------------------------------------------------------------------ faults

    def kill_worker(self) -> None:
        """SIGKILL the worker (mid-batch, whatever it was doing) with its beat and
        pool, as the kernel's out-of-memory killer or a lost machine would, then
        start a new one."""
        assert self.worker is not None
        os.killpg(self.worker.pid, signal.SIGKILL)
        self.worker.wait(30)
        self.start_worker()

    def restart_redis(self, down_for: float = 3.0) -> None:
        self.redis.stop()
        time.sleep(down_for)
        self.redis.start()

    def restart_postgres(self, down_for: float = 3.0) -> None:
        self.postgres.stop()  # pg_ctl -m fast
        time.sleep(down_for)
        self.postgres.start()

    def restart_web(self) -> None:
        stop_child(self.web)
        self.start_web()

    # ------------------------------------------------------------------ looking inside

    def sql(self, query: str, *params: Any) -> list[tuple]:
        with psycopg.connect(host=str(embedded.postgres_socket_dir(self.datadir)), user="postgres",
                             dbname=embedded.DATABASE_NAME) as connection:
            return connection.execute(query, params).fetchall()


# ---------------------------------------------------------------------- the load


@dataclass
class Answer:
    client: str
    kind: str  # write / search
    started: float
    duration: float
    status: str  # an HTTP status, "tool-error", or "no-connection"
    ok: bool
    retry_after: str = ""


@dataclass
class Load:
    stack: Stack
    answers: list[Answer] = field(default_factory=list)
    done_writes: list[tuple[str, str, str]] = field(default_factory=list)  # (client, kind, content)
    stop: threading.Event = field(default_factory=threading.Event)
    lock: threading.Lock = field(default_factory=threading.Lock)

    def run_client(self, client: dict[str, str]) -> None:
        if client["kind"] == "source":
            self.run_source(client)
            return
        http = httpx2.Client(timeout=TOOL_DEADLINE + 10, trust_env=False)
        n = 0
        pending: tuple[str, str] | None = None
        while not self.stop.is_set():
            if pending is None:
                n += 1
                pending = (f"Fault-load fact {client['name']} number {n} about the pager rota.",
                           f"{client['name']}-{n}")
            ok = self._call(http, client, "memory_write",
                            {"content": pending[0], "idempotency_key": pending[1]})
            if ok:
                with self.lock:
                    self.done_writes.append((client["name"], client["kind"], pending[0]))
                pending = None
            self._call(http, client, "memory_search", {"query": "pager rota fact", "limit": 5})
            time.sleep(0.05)
        http.close()

    def run_source(self, client: dict[str, str]) -> None:
        """A connector feeding documents of several paragraphs: work for the embedding worker."""
        http = httpx2.Client(timeout=60, trust_env=False)
        n = 0
        pending: dict | None = None
        while not self.stop.is_set():
            if pending is None:
                n += 1
                text = "\n\n".join(f"Runbook {n}, step {step}: check the {word} before the pager rota changes. "
                                    * 6 for step, word in enumerate(("queue", "cache", "database", "disk")))
                pending = {"resource_id": f"runbook-{n}", "title": f"Runbook {n}", "text": text}
            started = time.monotonic()
            status, ok = "no-connection", False
            try:
                response = http.post(f"{self.stack.url}/api/ingest/documents", json=pending,
                                     headers={"Authorization": f"Bearer {client['token']}"})
                status, ok = str(response.status_code), response.status_code in (200, 201)
            except httpx2.HTTPError:
                pass
            with self.lock:
                self.answers.append(Answer(client["name"], "ingest", started, time.monotonic() - started, status, ok))
                if ok:
                    self.done_writes.append((client["name"], "source", pending["resource_id"]))
            if ok:
                pending = None
            time.sleep(0.05 if ok else 0.2)
        http.close()

    def _call(self, http: httpx2.Client, client: dict[str, str], tool: str, arguments: dict) -> bool:
        body = {"jsonrpc": "2.0", "id": 1, "method": "tools/call",
                "params": {"name": tool, "arguments": arguments, "_meta": META}}
        headers = {"Content-Type": "application/json", "Accept": "application/json, text/event-stream",
                   "MCP-Protocol-Version": MODERN, "Mcp-Method": "tools/call", "Mcp-Name": tool,
                   "Authorization": f"Bearer {client['token']}"}
        started = time.monotonic()
        status, ok, retry_after = "no-connection", False, ""
        try:
            response = http.post(f"{self.stack.url}/mcp", json=body, headers=headers)
            status = str(response.status_code)
            retry_after = response.headers.get("retry-after", "")
            if response.status_code == 200:
                result = response.json().get("result", {})
                ok = not result.get("isError", False)
                if not ok:
                    status = "tool-error"
        except httpx2.HTTPError:
            pass
        with self.lock:
            self.answers.append(Answer(client["name"], tool.split("_")[-1], started, time.monotonic() - started,
                                       status, ok, retry_after))
        if not ok:
            time.sleep(0.2)
        return ok

    def start(self) -> list[threading.Thread]:
        threads = [threading.Thread(target=self.run_client, args=(client,), daemon=True)
                   for client in self.stack.clients]
        for thread in threads:
            thread.start()
        return threads


@dataclass
class Report:
    fault: str
    requests: int
    by_status: dict[str, int]
    longest_outage: float  # the longest a client went without a successful answer
    recovery: float  # from the end of the fault to the first success after it
    writes_done: int
    writes_lost: int
    writes_doubled: int
    slowest: float
    unembedded_after: int

    def row(self) -> str:
        statuses = ", ".join(f"{k}: {v}" for k, v in sorted(self.by_status.items()))
        return (f"| {self.fault} | {self.requests} | {statuses} | {self.longest_outage:.1f} s | "
                f"{self.recovery:.1f} s | {self.writes_done} | {self.writes_lost} |")


def run_fault(stack: Stack, fault: str, *, before: float, after: float) -> Report:
    """Load for `before` seconds, the fault, load for `after` seconds more; then
    wait for the embeddings and count."""
    load = Load(stack)
    threads = load.start()
    time.sleep(before)
    {"kill worker": stack.kill_worker, "restart redis": stack.restart_redis,
     "restart postgres": stack.restart_postgres, "restart web": stack.restart_web,
     "none": lambda: None}[fault]()
    recovered = time.monotonic()
    time.sleep(after)
    load.stop.set()
    for thread in threads:
        thread.join(TOOL_DEADLINE + 15)
    answers = sorted(load.answers, key=lambda a: a.started)
    # Present exactly once: a person's fact as one live fragment, an agent's as one proposal.
    lost = doubled = 0
    for _client, kind, content in load.done_writes:
        if kind == "user":
            count = stack.sql("SELECT count(*) FROM memoryhub_fragment WHERE value = %s", content)[0][0]
        elif kind == "source":
            # The document is stored once, with its live fragments.
            count = stack.sql(
                "SELECT count(*) FROM memoryhub_resource r WHERE r.external_id = %s AND EXISTS (SELECT 1 FROM "
                "memoryhub_fragment_resources l JOIN memoryhub_fragment f ON f.id = l.fragment_id "
                "WHERE l.resource_id = r.id AND f.retired_at IS NULL)", content)[0][0]
        else:
            count = stack.sql("SELECT count(*) FROM memoryhub_proposal WHERE content = %s", content)[0][0]
        lost += count == 0
        doubled += count > 1
    unembedded = _wait_embedded(stack, timeout=60)
    outage = 0.0
    for client in {a.client for a in answers}:
        last_ok = None
        for answer in (a for a in answers if a.client == client):
            end = answer.started + answer.duration
            if answer.ok:
                if last_ok is not None:
                    outage = max(outage, answer.started - last_ok)
                last_ok = end
    after_fault = [a for a in answers if a.started >= recovered and a.ok]
    recovery = (after_fault[0].started - recovered) if after_fault else float("inf")
    return Report(
        fault=fault, requests=len(answers), by_status=dict(Counter(a.status for a in answers)),
        longest_outage=outage, recovery=max(0.0, recovery), writes_done=len(load.done_writes), writes_lost=lost,
        writes_doubled=doubled, slowest=max((a.duration for a in answers), default=0.0),
        unembedded_after=unembedded,
    )


def _wait_embedded(stack: Stack, *, timeout: float) -> int:
    deadline = time.monotonic() + timeout
    while True:
        pending = stack.sql("SELECT count(*) FROM memoryhub_fragment WHERE embedding IS NULL")[0][0]
        if pending == 0 or time.monotonic() > deadline:
            return pending
        time.sleep(0.5)
