"""The demo workspace's memory: realistic, access-checked, seeded idempotently."""

from __future__ import annotations

import pytest

from memoryhub import access
from memoryhub.management.commands import seed_demo
from memoryhub.models import Agent, Fragment, Proposal, User
from memoryhub.services import access_rules, agents, collections, members, roles, workspaces
from memoryhub.services.demo import PRIVATE, SHARED, demo_memory_seed
from memoryhub.services.search import fragments_search


@pytest.fixture
def demo(db):
    """The demo workspace as `seed_demo` lays it out (its people, collections,
    access rules and agent, from the command's own tables), before its memory."""
    tenant = workspaces.workspace_create(caller=access.OPERATOR, slug=seed_demo.WORKSPACE, name="Demo workspace")
    system = access.system_caller(tenant=tenant)
    needed = {role for _, held, _ in seed_demo.PEOPLE for role in held.split(",")}
    needed |= {role for _, granted in seed_demo.COLLECTIONS.values() for role in granted}
    for role in sorted(needed):
        roles.role_create(caller=system, name=role)
    for username, held, admin in seed_demo.PEOPLE:
        members.member_add(caller=system, username=username, password=None, roles=held.split(","), is_admin=admin)
    for name, (description, granted) in seed_demo.COLLECTIONS.items():
        collections.collection_create(caller=system, name=name, description=description)
        for role in granted:
            access_rules.access_rule_grant(caller=system, role=role, collection=name)
    agents.agent_register(caller=system, name="triage-bot", scopes=["memory.read", "memory.write"],
                          roles=["engineering"])
    return tenant


def _caller(tenant, username):
    return access.caller_for_user(user=User.objects.get(tenant=tenant, username=username))


def _values(caller, query, **kwargs) -> list[str]:
    return [hit.fragment.value for hit in fragments_search(caller=caller, query=query, **kwargs).hits]


def test_seeding_twice_adds_nothing_the_second_time(demo):
    expected = sum(len(facts) for facts in PRIVATE.values()) + sum(len(items) for _, _, items in SHARED.values())
    assert demo_memory_seed(caller=access.system_caller(tenant=demo)) == expected
    assert demo_memory_seed(caller=access.system_caller(tenant=demo)) == 0
    assert Proposal.objects.filter(agent=Agent.objects.get(tenant=demo, name="triage-bot")).count() == 1
    assert not Fragment.objects.filter(tenant=demo, embedding__isnull=True).exists()


def test_the_demo_memory_obeys_the_access_rules(demo):
    demo_memory_seed(caller=access.system_caller(tenant=demo))
    bruno, chloe, ada = (_caller(demo, name) for name in ("bruno", "chloe", "ada"))
    restart = fragments_search(caller=bruno, query="how do I restart the payments service?")
    assert "kubectl rollout restart" in restart.hits[0].fragment.value
    assert restart.hits[0].provenance.documents[0].title == "Payments runbook"
    # Sales cannot read runbooks; engineering cannot read accounts.
    assert not any("kubectl" in value for value in _values(chloe, "restart payments"))
    assert not any("Initech" in value for value in _values(bruno, "Initech renewal"))
    # Private memory stays private, the admin's included.
    assert not any("Dana Okafor" in value for value in _values(ada, "Initech champion", limit=50))
    assert any("Dana Okafor" in value for value in _values(chloe, "Initech champion"))
