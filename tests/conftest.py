"""The one persona set, the one poll helper, live servers and the revision
fixture, shared by every test area.

Personas (`people` fixture; `live_people` for tests that serve HTTP from
another thread or process):

  Workspace "acme"
    ada     workspace admin            roles engineering, leads
    bruno   member                     engineering          (writes private memory)
    cleo    member                     engineering          (bruno's teammate: the same roles)
    carol   member                     sales                (same workspace, other roles)
    triage-bot   headless agent        memory.read memory.write; role engineering
    wiki         connected source      default collection runbooks (its credentials kept)
    tickets      connected source      default collection incidents
    collections  runbooks (engineering) · incidents (engineering, leads) · accounts (sales, leads)

  Workspace "globex" (the other tenant)
    olga    workspace admin            engineering
    globex-bot   headless agent        memory.read memory.write; engineering
    globex-wiki  connected source      runbooks
    collections  runbooks (engineering)

  nomad   a person in no workspace

Everyone signs in with PASSWORD. Everything is made through the same
caller-first services the product uses, acting as each workspace's system
caller, as `manage.py` does.
"""

from __future__ import annotations

import os
import socket
import threading
import time
import uuid
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any, TypeVar

import pytest
import uvicorn

from tests.support.mcp_client import REVISIONS, offer_revision

PASSWORD = "a long enough passphrase"
T = TypeVar("T")


# --------------------------------------------------------------------------- polling


def poll(condition: Callable[[], T], *, timeout: float = 30.0, interval: float = 0.05, what: str = "") -> T:
    """Call `condition` until it returns something truthy, and return that; fail
    the test after `timeout` seconds saying `what` never happened."""
    deadline = time.monotonic() + timeout
    while True:
        value = condition()
        if value:
            return value
        if time.monotonic() > deadline:
            raise AssertionError(f"gave up after {timeout:g} s waiting for {what or condition!r}")
        time.sleep(interval)


# The test process is no server's worker, whatever the environment it was started
# from says: its in-process servers leave its collector as it is (mcpapi.serving.settle_heap).
os.environ.pop("MEMORYHUB_SETTLE_HEAP", None)


# --------------------------------------------------------------------------- personas


@pytest.fixture(autouse=True)
def fast_people(settings):
    """Argon2 is the product's hasher; tests only need a fast one. Each test
    starts with fresh throttle counters in the shared Redis."""
    settings.PASSWORD_HASHERS = ["django.contrib.auth.hashers.MD5PasswordHasher"]
    settings.RATELIMIT_CACHE_PREFIX = f"rl-test-{uuid.uuid4().hex}:"
    return settings


@dataclass
class People:
    acme: Any  # Tenant
    globex: Any
    ada: Any  # User
    bruno: Any
    cleo: Any
    carol: Any
    olga: Any
    nomad: Any
    triage_bot: Any  # AgentCredentials
    globex_bot: Any
    wiki: Any  # Source
    wiki_credentials: Any  # AgentCredentials of the wiki source
    tickets: Any
    globex_wiki: Any

    def caller(self, who: Any, *, client_id: str = "test-client") -> Any:
        """The domain caller for a person (User) or an agent (AgentCredentials or Agent)."""
        from memoryhub import access
        from memoryhub.models import Agent, User

        if isinstance(who, User):
            return access.caller_for_user(user=who, client_id=client_id)
        agent = who if isinstance(who, Agent) else who.agent
        return access.caller_for_agent(agent=agent, client_id=client_id)

    def collection(self, name: str, tenant: Any = None) -> Any:
        return (tenant or self.acme).collections.get(name=name)

    def system(self, tenant: Any = None) -> Any:
        from memoryhub import access

        return access.system_caller(tenant=tenant or self.acme)


def make_people() -> People:
    from memoryhub import access
    from memoryhub.models import User
    from memoryhub.services import access_rules, agents, collections, members, roles, sources, workspaces

    def workspace(slug: str, name: str, *, roles_: list[str], rules: dict[str, list[str]]) -> Any:
        tenant = workspaces.workspace_create(caller=access.OPERATOR, slug=slug, name=name)
        system = access.system_caller(tenant=tenant)
        for role in roles_:
            roles.role_create(caller=system, name=role)
        for collection, granted in rules.items():
            collections.collection_create(caller=system, name=collection)
            for role in granted:
                access_rules.access_rule_grant(caller=system, role=role, collection=collection)
        return tenant

    acme = workspace("acme", "Acme Inc.", roles_=["engineering", "leads", "sales"], rules={
        "runbooks": ["engineering"], "incidents": ["engineering", "leads"], "accounts": ["sales", "leads"]})
    globex = workspace("globex", "Globex", roles_=["engineering"], rules={"runbooks": ["engineering"]})
    in_acme, in_globex = access.system_caller(tenant=acme), access.system_caller(tenant=globex)

    def person(caller: Any, username: str, granted: list[str], admin: bool = False) -> Any:
        return members.member_add(caller=caller, username=username, password=PASSWORD, email=f"{username}@test.invalid",
                                  roles=granted, is_admin=admin)

    ada = person(in_acme, "ada", ["engineering", "leads"], admin=True)
    bruno = person(in_acme, "bruno", ["engineering"])
    cleo = person(in_acme, "cleo", ["engineering"])
    carol = person(in_acme, "carol", ["sales"])
    olga = person(in_globex, "olga", ["engineering"], admin=True)
    nomad = User.objects.create_user(username="nomad", password=PASSWORD)
    as_ada = access.caller_for_user(user=ada)
    as_olga = access.caller_for_user(user=olga)
    triage_bot = agents.agent_register(caller=as_ada, name="triage-bot", scopes=["memory.read", "memory.write"],
                                       roles=["engineering"])
    globex_bot = agents.agent_register(caller=as_olga, name="globex-bot", scopes=["memory.read", "memory.write"],
                                       roles=["engineering"])
    wiki, wiki_credentials = sources.source_register(caller=as_ada, name="wiki", collection="runbooks")
    tickets, _ = sources.source_register(caller=as_ada, name="tickets", kind="tickets", collection="incidents")
    globex_wiki, _ = sources.source_register(caller=as_olga, name="globex-wiki", collection="runbooks")
    return People(acme=acme, globex=globex, ada=ada, bruno=bruno, cleo=cleo, carol=carol, olga=olga, nomad=nomad,
                  triage_bot=triage_bot, globex_bot=globex_bot, wiki=wiki, wiki_credentials=wiki_credentials,
                  tickets=tickets, globex_wiki=globex_wiki)


@pytest.fixture
def people(db) -> People:
    return make_people()


@pytest.fixture
def live_people(transactional_db) -> People:
    """The same personas, committed, for servers in other threads or processes."""
    return make_people()


def signed_in(user: Any) -> Any:
    """A Django test client signed in as `user`."""
    from django.test import Client

    client = Client()
    client.force_login(user)
    return client


# --------------------------------------------------------------------------- live servers


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


@dataclass
class LiveServer:
    url: str
    server: uvicorn.Server


@pytest.fixture
def asgi_server(transactional_db, settings) -> Iterator[LiveServer]:
    """The project's real ASGI application (MCP gateway + Django) under uvicorn on
    127.0.0.1, with the server options every memoryhub process runs with
    (mcpapi.serving), in a thread of this process so it shares the test
    database. The public base URL is the live server's, so resource URLs and
    discovery match."""
    from mcpapi.serving import server_options
    from memoryhub.asgi import django_app
    from memoryhub.mcp_adapter.wiring import build_asgi_application

    port = free_port()
    url = f"http://127.0.0.1:{port}"
    settings.BASE_URL = url
    settings.OAUTH2_PROVIDER = {**settings.OAUTH2_PROVIDER, "OIDC_ISS_ENDPOINT": url}
    settings.MEMORYHUB_ALLOWED_ORIGINS = [url]
    settings.CSRF_TRUSTED_ORIGINS = [url]
    application = build_asgi_application(django_app)
    config = uvicorn.Config(application, host="127.0.0.1", port=port, log_level="warning", **server_options())
    server = uvicorn.Server(config)
    thread = threading.Thread(target=server.run, daemon=True)
    thread.start()
    poll(lambda: server.started or not thread.is_alive(), timeout=30, interval=0.02, what="uvicorn to start")
    if not server.started:
        raise RuntimeError("uvicorn did not start")
    yield LiveServer(url=url, server=server)
    server.should_exit = True
    thread.join(15)
    from django.db import connections

    connections.close_all()


@pytest.fixture(params=REVISIONS)
def revision(request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch) -> str:
    """Each protocol revision the server accepts, offered by the official client."""
    return offer_revision(str(request.param), monkeypatch)
