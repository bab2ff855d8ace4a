"""Personas for the memory core.

Workspace "acme":
  owner        olivia  engineering          writes private memory
  team member  theo    engineering          same roles as the owner
  outsider     oscar   sales                same workspace, other roles
  admin        ada     engineering, leads   workspace admin
  agent        triage-bot (assistant, engineering)
  source       wiki (connected source writing into runbooks)
Collections: runbooks (engineering), incidents (engineering, leads), accounts (sales, leads).

Workspace "globex" (the other tenant): zed (engineering), its own runbooks, agent globex-bot.
"""

from __future__ import annotations

import datetime as dt
from collections.abc import Callable
from dataclasses import dataclass

import pytest
from django.utils import timezone

from memoryhub.access import Caller, caller_for_agent, caller_for_user
from memoryhub.models import Agent, Collection, Fragment, Source, Tenant
from memoryhub.services import workspaces
from memoryhub.services.write import fact_hash, fragment_ingest, subject_of


@dataclass
class Workspace:
    tenant: Tenant
    owner: Caller
    member: Caller
    outsider: Caller
    admin: Caller
    agent: Caller
    source: Source
    collections: dict[str, Collection]


def _workspace(slug: str, *, people: list[tuple[str, list[str], bool]], rules: dict[str, list[str]]) -> dict:
    tenant = workspaces.workspace_create(slug=slug, name=slug.title())
    callers = {}
    for username, roles, admin in people:
        user = workspaces.person_add(tenant=tenant, username=username, password=None, roles=roles, is_admin=admin)
        callers[username] = caller_for_user(user=user, client_id=f"{slug}-client")
    collections = {}
    for name, roles in rules.items():
        collections[name] = workspaces.collection_create(tenant=tenant, name=name)
        for role in roles:
            workspaces.access_rule_grant(tenant=tenant, role=role, collection=name)
    return {"tenant": tenant, "callers": callers, "collections": collections}


@pytest.fixture
def acme(db) -> Workspace:
    made = _workspace(
        "acme",
        people=[
            ("olivia", ["engineering"], False),
            ("theo", ["engineering"], False),
            ("oscar", ["sales"], False),
            ("ada", ["engineering", "leads"], True),
        ],
        rules={"runbooks": ["engineering"], "incidents": ["engineering", "leads"], "accounts": ["sales", "leads"]},
    )
    credentials = workspaces.agent_register(
        tenant=made["tenant"], name="triage-bot", scopes=["memory.read", "memory.write"], roles=["engineering"]
    )
    source, _ = workspaces.source_connect(tenant=made["tenant"], name="wiki", collection="runbooks")
    callers = made["callers"]
    return Workspace(
        tenant=made["tenant"],
        owner=callers["olivia"],
        member=callers["theo"],
        outsider=callers["oscar"],
        admin=callers["ada"],
        agent=caller_for_agent(agent=credentials.agent, client_id=credentials.client_id),
        source=source,
        collections=made["collections"],
    )


@pytest.fixture
def globex(db) -> Workspace:
    made = _workspace("globex", people=[("zed", ["engineering"], True)], rules={"runbooks": ["engineering"]})
    credentials = workspaces.agent_register(
        tenant=made["tenant"], name="globex-bot", scopes=["memory.read"], roles=["engineering"]
    )
    source, _ = workspaces.source_connect(tenant=made["tenant"], name="globex-wiki", collection="runbooks")
    zed = made["callers"]["zed"]
    return Workspace(
        tenant=made["tenant"], owner=zed, member=zed, outsider=zed, admin=zed,
        agent=caller_for_agent(agent=credentials.agent, client_id=credentials.client_id), source=source,
        collections=made["collections"],
    )


@pytest.fixture
def shared_fragment(acme) -> Callable[..., Fragment]:
    """A fragment the wiki source contributed to a collection."""

    def make(value: str, collection: str = "runbooks", *, source: Source | None = None,
             created_at: dt.datetime | None = None, resources=()) -> Fragment:
        src = source or acme.source
        fragment, _ = fragment_ingest(
            source=src, value=value, collection=src.tenant.collections.get(name=collection),
            created_at=created_at, resources=resources,
        )
        return fragment

    return make


def private_fragment(caller: Caller, value: str, *, embed: bool = True, recorded_at: dt.datetime | None = None,
                     **extra) -> Fragment:
    """A private fragment written straight to the table (for access tests that
    need full control of times and homes)."""
    from memoryhub.embeddings import get_embedder

    now = recorded_at or timezone.now()
    fragment = Fragment.objects.create(
        tenant=caller.tenant, owner_user=caller.user, owner_agent=caller.agent, value=value,
        subject_key=subject_of(value), created_at=extra.pop("created_at", now), recorded_at=now,
        content_hash=fact_hash(value), embedding=get_embedder().embed([value])[0] if embed else None,
        embedded_at=now if embed else None, **extra,
    )
    if caller.agent is not None:
        fragment.agents.add(caller.agent)
    return fragment


def agent_named(tenant: Tenant, name: str) -> Agent:
    return Agent.objects.get(tenant=tenant, name=name)
