"""Personas for the browser side (people's pages, the review console, workspace
administration).

Workspace "acme": ada (admin; engineering, leads), bruno (member; engineering),
carol (member; sales); collections runbooks (engineering) and accounts (sales);
the agent triage-bot (read, write; engineering); the source wiki (runbooks).
Workspace "globex": olga (admin), the agent globex-bot.
nomad is a person in no workspace.
"""

from __future__ import annotations

import uuid
from dataclasses import dataclass
from typing import Any

import pytest
from django.test import Client

from memoryhub.access import caller_for_agent, caller_for_user
from memoryhub.models import Agent, Proposal, Source, Tenant, User
from memoryhub.services import workspaces
from memoryhub.services.search import memory_search
from memoryhub.services.workspaces import AgentCredentials
from memoryhub.services.write import fragment_ingest, memory_write

PASSWORD = "a long enough passphrase"


@pytest.fixture(autouse=True)
def console_settings(settings):
    # Fresh throttle counters in the shared Redis; a fast hasher for test people.
    settings.RATELIMIT_CACHE_PREFIX = f"rl-test-{uuid.uuid4().hex}:"
    settings.PASSWORD_HASHERS = ["django.contrib.auth.hashers.MD5PasswordHasher"]
    return settings


@dataclass
class People:
    acme: Tenant
    globex: Tenant
    ada: User
    bruno: User
    carol: User
    olga: User
    nomad: User
    triage_bot: AgentCredentials
    globex_bot: AgentCredentials
    wiki: Source


@pytest.fixture
def people(db) -> People:
    acme = workspaces.workspace_create(slug="acme", name="Acme Inc.")
    globex = workspaces.workspace_create(slug="globex", name="Globex")
    ada = workspaces.person_add(tenant=acme, username="ada", password=PASSWORD, roles=["engineering", "leads"],
                                is_admin=True)
    bruno = workspaces.person_add(tenant=acme, username="bruno", password=PASSWORD, roles=["engineering"])
    carol = workspaces.person_add(tenant=acme, username="carol", password=PASSWORD, roles=["sales"])
    olga = workspaces.person_add(tenant=globex, username="olga", password=PASSWORD, roles=["engineering"],
                                 is_admin=True)
    nomad = User.objects.create_user(username="nomad", password=PASSWORD)
    for name, role in (("runbooks", "engineering"), ("accounts", "sales")):
        workspaces.collection_create(tenant=acme, name=name)
        workspaces.access_rule_grant(tenant=acme, role=role, collection=name)
    triage_bot = workspaces.agent_register(tenant=acme, name="triage-bot", scopes=["memory.read", "memory.write"],
                                           roles=["engineering"], created_by=ada)
    globex_bot = workspaces.agent_register(tenant=globex, name="globex-bot", scopes=["memory.read", "memory.write"],
                                           roles=["engineering"], created_by=olga)
    wiki, _ = workspaces.source_connect(tenant=acme, name="wiki", collection="runbooks", created_by=ada)
    return People(acme=acme, globex=globex, ada=ada, bruno=bruno, carol=carol, olga=olga, nomad=nomad,
                  triage_bot=triage_bot, globex_bot=globex_bot, wiki=wiki)


def signed_in(user: User) -> Client:
    client = Client()
    client.force_login(user)
    return client


def propose(agent: Agent | AgentCredentials, content: str, **extra: Any) -> Proposal:
    """An agent's memory_write, parked as a proposal."""
    agent = agent.agent if isinstance(agent, AgentCredentials) else agent
    output = memory_write(caller=caller_for_agent(agent=agent, client_id="test-client"), content=content, **extra)
    return Proposal.objects.get(pk=output["proposal_id"])


def remember(user: User, content: str, **extra: Any) -> dict:
    """A person's memory_write (decided synchronously)."""
    return memory_write(caller=caller_for_user(user=user), content=content, **extra)


def search(user: User, query: str, **extra: Any) -> dict:
    return memory_search(caller=caller_for_user(user=user), query=query, **extra)


def share(people: People, value: str, collection: str = "runbooks"):
    fragment, _ = fragment_ingest(source=people.wiki, value=value,
                                  collection=people.acme.collections.get(name=collection))
    return fragment
