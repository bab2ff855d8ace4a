"""The real deployments the MCP suites run against, beside mcpapi's fake-backed gateway.

    app    the single-process product: memoryhub.asgi in a uvicorn process of its own,
           with its own public origin, on the pytest-django test database
    edge   an edge process (no database, no secret) in front of a memory-service process,
           on the same database (tests/edge/live.py)

(The third, "fake", is tests/mcpapi/live.py: mcpapi's gateway over an in-memory
MemoryClient, for what only a fake can stage: a slow or failing memory service and
recorded calls.)

`RealDeployment.token()` issues an access token of the authorisation server's own model
(django-oauth-toolkit's AccessToken, stored hashed) to a fresh person or agent, for
exactly the resource asked for; the deployment's own verifier (at the edge: the token
exchange) decides what it opens. A fresh principal per token keeps rate-limit buckets
apart. The principals are made as `manage.py` makes them: by the caller-first services,
acting as the suite workspace's system caller (`suite_workspace`); they are not personas
(tests/conftest.py has the one persona set). The OAuth flows that issue such tokens are
tested end to end in tests/oauth, tests/edge and tests/mcpapi/test_real_domain.py.
"""

from __future__ import annotations

import asyncio
import secrets
import tempfile
import uuid
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from contextlib import contextmanager
from dataclasses import dataclass, field
from datetime import timedelta
from pathlib import Path
from typing import Any, Protocol, TypeVar

import pytest

from mcpapi.auth import resource_url
from mcpapi.client import MEMORY_SCOPES
from mcpapi.connection import FULL_ENDPOINT, Endpoint
from tests.conftest import free_port
from tests.support.processes import forget_redis_keys, service_environment, spawn_uvicorn, wait_healthy

T = TypeVar("T")
SUITE_WORKSPACE = "mcp-suite"
SUITE_CLIENT = "MCP suite client"
# The one role every suite principal holds.
SUITE_ROLE = "engineering"
# Production allows 60 a minute with bursts of 10. The suites give every token a fresh
# principal and use it a few times; one token a minute makes the burst boundary exact
# however slowly a test runs.
SUITE_RATE_ENV = {"MEMORYHUB_RATE_PER_MINUTE": "1", "MEMORYHUB_RATE_BURST": "10"}
# Parameters for fixtures that pick a real deployment by name ("<name>_deployment" in
# tests/mcpapi/conftest.py). Their tests are transactional: the servers in other processes
# see what a test writes (its principals and tokens), and the tables are emptied after it.
_TRANSACTIONAL = pytest.mark.django_db(transaction=True)
REAL_DEPLOYMENTS = (pytest.param("app", marks=_TRANSACTIONAL), pytest.param("edge", marks=_TRANSACTIONAL))
# The gateway's request body limit (contract 001), which both deployments keep.
MAX_BODY_BYTES = 256 * 1024


@dataclass
class RealDeployment:
    """A deployment the tests reach over HTTP, and the test database behind it."""

    name: str
    base_url: str
    db_blocker: Any  # pytest-django's django_db_blocker
    max_body_bytes: int = MAX_BODY_BYTES
    _identities: dict[str, tuple[str, str, str]] = field(default_factory=dict)

    @property
    def allowed_origin(self) -> str:
        """A browser origin the deployment accepts: its own (MEMORYHUB_ALLOWED_ORIGINS' default)."""
        return self.base_url

    def url(self, endpoint: Endpoint = FULL_ENDPOINT) -> str:
        return self.base_url + endpoint

    def token(
        self,
        *,
        endpoint: Endpoint = FULL_ENDPOINT,
        kind: str = "user",
        scopes: tuple[str, ...] = MEMORY_SCOPES,
        subject: str | None = None,
        tenant: str | None = None,
        expires_in: float = 900,
        resource: str | None = None,
    ) -> str:
        """A token for a fresh person (or agent) named `subject`, in workspace `tenant`."""
        name = subject or f"{kind}-{uuid.uuid4().hex[:12]}"
        return _off_the_event_loop(lambda: self._issue(endpoint, kind, scopes, name, tenant, expires_in, resource))

    def _issue(self, endpoint: Endpoint, kind: str, scopes: tuple[str, ...], name: str, tenant: str | None,
               expires_in: float, resource: str | None) -> str:
        from django.utils import timezone
        from oauth2_provider.models import AccessToken, Application, set_token_value

        from memoryhub.services import agents, members

        with self.db_blocker.unblock():
            workspace, system = suite_workspace(tenant or SUITE_WORKSPACE)
            if kind == "agent":
                agent = agents.agent_register(
                    caller=system, name=name, scopes=["memory.read", "memory.write"], roles=[SUITE_ROLE]
                ).agent
                application, user, principal = agent.application, None, f"agent:{agent.name}"
            else:
                user = members.member_add(caller=system, username=name, password=None, roles=[SUITE_ROLE])
                application, _ = Application.objects.get_or_create(
                    name=SUITE_CLIENT,
                    defaults={
                        "client_type": Application.CLIENT_PUBLIC,
                        "authorization_grant_type": Application.GRANT_AUTHORIZATION_CODE,
                        "redirect_uris": "http://127.0.0.1:8765/callback",
                        "client_secret": "",
                        "hash_client_secret": False,
                    },
                )
                principal = f"user:{user.username}"
            raw = secrets.token_urlsafe(32)
            access = AccessToken(
                application=application, user=user, scope=" ".join(scopes),
                resource=[resource or resource_url(self.base_url, endpoint)],
                expires=timezone.now() + timedelta(seconds=expires_in),
            )
            set_token_value(access, raw)
            access.save()
        self._identities[raw] = (principal, str(workspace.id), kind)
        return raw

    def identity(self, token: str) -> tuple[str, str, str]:
        """(subject, tenant, principal_kind) as whoami must report them for `token`."""
        return self._identities[token]

    def writes_by(self, subject: str) -> int:
        """What requests of the principal named `subject` left in memory: one per serving
        receipt, and one per write, whether it left a fragment, a proposal or only its
        idempotency record (a dropped write). Idempotency records name the writer by id."""
        from django.db.models import Q

        from memoryhub.models import Agent, Fragment, IdempotencyRecord, Proposal, Receipt, User

        def count() -> int:
            with self.db_blocker.unblock():
                keys = [f"user:{pk}" for pk in User.objects.filter(username=subject).values_list("pk", flat=True)]
                keys += [f"agent:{pk}" for pk in Agent.objects.filter(name=subject).values_list("pk", flat=True)]
                rows = (
                    Fragment.objects.filter(Q(owner_user__username=subject) | Q(owner_agent__name=subject)).count()
                    + Proposal.objects.filter(agent__name=subject).count()
                )
                writes = IdempotencyRecord.objects.filter(principal__in=keys).count()
                receipts = Receipt.objects.filter(subject__in=[f"user:{subject}", f"agent:{subject}"]).count()
                return receipts + max(writes, rows)

        return _off_the_event_loop(count)


def suite_workspace(slug: str = SUITE_WORKSPACE) -> tuple[Any, Any]:
    """The suites' workspace (made on first use, with SUITE_ROLE) and its system caller, which
    registers the fresh principals as `manage.py` would."""
    from memoryhub import access
    from memoryhub.services import roles, workspaces

    workspace = workspaces.workspace_create(caller=access.OPERATOR, slug=slug, exist_ok=True)
    system = access.system_caller(tenant=workspace)
    roles.role_create(caller=system, name=SUITE_ROLE, exist_ok=True)
    return workspace, system


def _off_the_event_loop(work: Callable[[], T]) -> T:
    """`work()`, in a thread of its own when an event loop runs here (async tests): Django's
    ORM refuses to run in one. That thread's database connection is closed after."""
    try:
        asyncio.get_running_loop()
    except RuntimeError:
        return work()

    def in_thread() -> T:
        from django.db import connections

        try:
            return work()
        finally:
            connections.close_all()

    with ThreadPoolExecutor(max_workers=1) as pool:
        return pool.submit(in_thread).result()


@contextmanager
def single_process(
    settings_dict: dict[str, Any], db_blocker: Any, *, gateway_env: dict[str, str] | None = None
) -> Iterator[RealDeployment]:
    """The product as the first README command runs it: one ASGI process serving MCP,
    OAuth and pages, its public origin its own URL."""
    port = free_port()
    base_url = f"http://127.0.0.1:{port}"
    run = uuid.uuid4().hex[:10]
    key_prefix = task_queue = f"app-test-{run}"
    env = service_environment(
        settings_dict, base_url=base_url, key_prefix=key_prefix, task_queue=task_queue, extra=gateway_env
    )
    process = spawn_uvicorn(
        "single-process", "memoryhub.asgi:application", port, env, Path(tempfile.mkdtemp(prefix="app-test-"))
    )
    try:
        wait_healthy(process, base_url)
        yield RealDeployment(name="app", base_url=base_url, db_blocker=db_blocker)
    finally:
        process.stop()
        forget_redis_keys(key_prefix, task_queue)


class McpDeployment(Protocol):
    """What the MCP suites need of a deployment: RealDeployment here, or the fake-backed
    RunningServer of tests/mcpapi/live.py."""

    name: str
    base_url: str

    @property
    def max_body_bytes(self) -> int: ...

    @property
    def allowed_origin(self) -> str: ...

    def url(self, endpoint: Endpoint = FULL_ENDPOINT) -> str: ...

    def token(self, *, endpoint: Endpoint = FULL_ENDPOINT, kind: str = "user",
              scopes: tuple[str, ...] = MEMORY_SCOPES, **claims: Any) -> str: ...

    def identity(self, token: str) -> tuple[str, str, str]: ...

    def writes_by(self, subject: str) -> int: ...
