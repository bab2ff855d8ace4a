"""The demo workspace's memory: realistic, access-checked, seeded idempotently."""

from __future__ import annotations

import pytest

from memoryhub.access import caller_for_user
from memoryhub.models import Agent, Fragment, Proposal, User
from memoryhub.services.demo import PRIVATE, SHARED, demo_memory_seed
from memoryhub.services.search import memory_search
from memoryhub.services.workspaces import (
    access_rule_grant,
    agent_register,
    collection_create,
    person_add,
    workspace_create,
)


@pytest.fixture
def demo(db):
    tenant = workspace_create(slug="demo", name="Demo workspace")
    for username, roles, admin in [("ada", ["engineering", "leads"], True), ("bruno", ["engineering"], False),
                                   ("chloe", ["sales"], False)]:
        person_add(tenant=tenant, username=username, password=None, roles=roles, is_admin=admin)
    for name, roles in {"runbooks": ["engineering"], "incidents": ["engineering", "leads"],
                        "accounts": ["sales", "leads"], "handbook": ["engineering", "sales", "leads"]}.items():
        collection_create(tenant=tenant, name=name)
        for role in roles:
            access_rule_grant(tenant=tenant, role=role, collection=name)
    agent_register(tenant=tenant, name="triage-bot", scopes=["memory.read", "memory.write"], roles=["engineering"])
    return tenant


def _caller(tenant, username):
    return caller_for_user(user=User.objects.get(tenant=tenant, username=username))


def test_seeding_twice_adds_nothing_the_second_time(demo):
    expected = sum(len(facts) for facts in PRIVATE.values()) + sum(len(items) for _, _, items in SHARED.values())
    assert demo_memory_seed(tenant=demo) == expected
    assert demo_memory_seed(tenant=demo) == 0
    assert Proposal.objects.filter(agent=Agent.objects.get(tenant=demo, name="triage-bot")).count() == 1
    assert not Fragment.objects.filter(tenant=demo, embedding__isnull=True).exists()


def test_the_demo_memory_obeys_the_access_rules(demo):
    demo_memory_seed(tenant=demo)
    bruno, chloe, ada = (_caller(demo, name) for name in ("bruno", "chloe", "ada"))
    restart = memory_search(caller=bruno, query="how do I restart the payments service?")
    assert "kubectl rollout restart" in restart["fragments"][0]["value"]
    assert restart["fragments"][0]["resources"][0]["title"] == "Payments runbook"
    # Sales cannot read runbooks; engineering cannot read accounts.
    assert not any("kubectl" in f["value"] for f in memory_search(caller=chloe, query="restart payments")["fragments"])
    assert not any("Initech" in f["value"] for f in memory_search(caller=bruno, query="Initech renewal")["fragments"])
    # Private memory stays private, the admin's included.
    assert not any("Dana Okafor" in f["value"]
                   for f in memory_search(caller=ada, query="Initech champion", limit=50)["fragments"])
    assert any("Dana Okafor" in f["value"] for f in memory_search(caller=chloe, query="Initech champion")["fragments"])
