"""The visibility rules, persona by persona, and each enforcement layer on its own."""

from __future__ import annotations

import datetime as dt
import logging

import pytest
from django.db.models import Q
from django.utils import timezone

from memoryhub import access
from memoryhub.errors import PermissionDenied
from memoryhub.models import EnforcementAlarm, Fragment, Membership
from memoryhub.services import search
from memoryhub.services.search import memory_search
from memoryhub.services.workspaces import agent_register, person_add
from tests.memory.conftest import private_fragment


def _visible_ids(caller, *, as_of=None, **filters) -> set:
    policy = access.read_policy(caller=caller, as_of=as_of or timezone.now(), **filters)
    sql = set(access.visible_fragments(policy).values_list("pk", flat=True))
    rows = access.with_access_facts(Fragment.objects.all())
    python = {f.pk for f in rows if policy.refusal(f) is None}
    # The two interpreters of the one rule tree agree row for row.
    assert sql == python
    return sql


def _served(caller, query, **kwargs) -> set[str]:
    return {f["id"] for f in memory_search(caller=caller, query=query, limit=50, **kwargs)["fragments"]}


def test_private_memory_is_readable_by_its_owner_alone(acme, globex):
    mine = private_fragment(acme.owner, "My locker code is near the east stairwell.")
    assert _visible_ids(acme.owner) == {mine.pk}
    for other in (acme.member, acme.outsider, acme.admin, acme.agent, globex.owner):
        assert mine.pk not in _visible_ids(other)
        assert str(mine.pk) not in _served(other, "locker east stairwell")


def test_it_shows_a_workspace_admin_no_one_elses_private_memory(acme):
    mine = private_fragment(acme.owner, "I am interviewing with another company next week.")
    assert Membership.objects.get(user=acme.admin.user).is_admin
    assert str(mine.pk) not in _served(acme.admin, "interviewing with another company")


def test_shared_memory_follows_todays_access_rules(acme, shared_fragment):
    runbook = shared_fragment("Restart the payments service with kubectl rollout restart.")
    account = shared_fragment("Initech renews its contract in March.", "accounts")
    assert _visible_ids(acme.owner) == {runbook.pk}
    assert _visible_ids(acme.member) == {runbook.pk}
    assert _visible_ids(acme.outsider) == {account.pk}
    assert _visible_ids(acme.admin) == {runbook.pk, account.pk}  # engineering + leads

    # Rules are always today's: granting sales the runbooks opens them at once,
    # also for a read of the past.
    before = timezone.now()
    from memoryhub.services.workspaces import access_rule_grant

    access_rule_grant(tenant=acme.tenant, role="sales", collection="runbooks")
    assert runbook.pk in _visible_ids(acme.outsider)
    assert runbook.pk not in _visible_ids(acme.outsider, as_of=before - dt.timedelta(days=1))  # not recorded yet


def test_roles_are_looked_up_at_read_time(acme, shared_fragment):
    runbook = shared_fragment("Rotate the TLS certificates on the load balancer every quarter.")
    assert runbook.pk in _visible_ids(acme.member)
    Membership.objects.get(user=acme.member.user).roles.clear()
    assert runbook.pk not in _visible_ids(acme.member)
    assert access.audience_for(acme.member).role_names == ()


def test_nothing_crosses_tenants(acme, globex, shared_fragment):
    acme_runbook = shared_fragment("Acme deploys on Tuesdays after the change review.")
    globex_runbook = shared_fragment("Globex deploys on Fridays.", source=globex.source)
    # Same role and collection names in both tenants: still nothing crosses.
    assert _visible_ids(acme.owner) == {acme_runbook.pk}
    assert _visible_ids(globex.owner) == {globex_runbook.pk}
    assert str(acme_runbook.pk) not in _served(globex.owner, "deploys Tuesdays change review")


def test_an_agent_reads_a_connected_source_only_when_it_names_it(acme, shared_fragment):
    runbook = shared_fragment("Page the database on-call when replication lag exceeds 30 seconds.")
    assert runbook.pk not in _visible_ids(acme.agent)
    assert runbook.pk in _visible_ids(acme.agent, agents=["wiki"])
    assert str(runbook.pk) not in _served(acme.agent, "replication lag on-call")
    assert str(runbook.pk) in _served(acme.agent, "replication lag on-call", agents=["wiki"])
    # People see it through the access rules without naming anything.
    assert runbook.pk in _visible_ids(acme.owner)


def test_naming_a_source_never_goes_beyond_the_access_rules(acme, shared_fragment):
    account = shared_fragment("Initech's champion is their VP of Operations.", "accounts")
    # triage-bot holds engineering only; accounts are for sales and leads.
    assert account.pk not in _visible_ids(acme.agent, agents=["wiki"])


def test_agents_filter_only_narrows(acme, shared_fragment):
    runbook = shared_fragment("The staging cluster is rebuilt every Sunday night.")
    mine = private_fragment(acme.owner, "I keep my staging notes in the team wiki.")
    everything = _visible_ids(acme.owner)
    assert everything == {runbook.pk, mine.pk}
    assert _visible_ids(acme.owner, agents=["wiki"]) == {runbook.pk}
    assert _visible_ids(acme.owner, agents=["no-such-agent"]) == set()
    assert _visible_ids(acme.owner, agents=["wiki", "no-such-agent"]) <= everything


def test_an_agents_private_memory_is_its_own(acme):
    other = agent_register(tenant=acme.tenant, name="other-bot", scopes=["memory.read"], roles=["engineering"])
    bot_note = private_fragment(acme.agent, "Triage rotation starts with the newest ticket.")
    assert bot_note.pk in _visible_ids(acme.agent)
    assert bot_note.pk not in _visible_ids(access.caller_for_agent(agent=other.agent))
    assert bot_note.pk not in _visible_ids(acme.admin)


def test_as_of_reads_the_memory_as_it_stood(acme):
    t0 = timezone.now() - dt.timedelta(days=10)
    old = private_fragment(acme.owner, "The standup is at 9:30.", recorded_at=t0)
    new = private_fragment(acme.owner, "The standup is at 10:00.", recorded_at=t0 + dt.timedelta(days=5))
    Fragment.objects.filter(pk=old.pk).update(retired_at=new.recorded_at, retired_reason="superseded",
                                              successor=new)
    assert _visible_ids(acme.owner, as_of=t0 - dt.timedelta(seconds=1)) == set()
    assert _visible_ids(acme.owner, as_of=t0) == {old.pk}  # recorded at T: visible at T
    assert _visible_ids(acme.owner, as_of=new.recorded_at - dt.timedelta(microseconds=1)) == {old.pk}
    assert _visible_ids(acme.owner, as_of=new.recorded_at) == {new.pk}  # retired at T: gone at T
    assert _visible_ids(acme.owner) == {new.pk}


def test_created_and_resource_filters_narrow(acme, shared_fragment):
    jan = shared_fragment("Q1 planning notes.", created_at=dt.datetime(2026, 1, 10, tzinfo=dt.UTC),
                          resources=[{"id": "doc-1", "title": "Q1 plan", "uri": "https://wiki.example/q1"}])
    jun = shared_fragment("Q3 planning notes.", created_at=dt.datetime(2026, 6, 10, tzinfo=dt.UTC))
    feb = dt.datetime(2026, 2, 1, tzinfo=dt.UTC)
    assert _visible_ids(acme.owner, created_after=feb) == {jun.pk}
    assert _visible_ids(acme.owner, created_before=feb) == {jan.pk}
    assert _visible_ids(acme.owner, resource_ids=["doc-1"]) == {jan.pk}
    assert _visible_ids(acme.owner, resource_ids=["doc-unknown"]) == set()


def test_a_revoked_agent_or_a_source_identity_is_refused(acme):
    acme.agent.agent.revoked_at = timezone.now()
    acme.agent.agent.save()
    with pytest.raises(PermissionDenied):
        access.caller_for_agent(agent=acme.agent.agent)
    with pytest.raises(PermissionDenied):
        access.caller_for_agent(agent=acme.source.agent)


def test_the_principal_must_belong_to_its_tenant(acme, globex):
    with pytest.raises(PermissionDenied):
        access.caller_from_principal(tenant=str(globex.tenant.pk), subject="user:olivia", kind="user", client_id="x")
    with pytest.raises(PermissionDenied):
        access.caller_from_principal(
            tenant=str(globex.tenant.pk), subject="agent:triage-bot", kind="agent", client_id=acme.agent.client_id
        )
    caller = access.caller_from_principal(tenant=str(acme.tenant.pk), subject="user:olivia", kind="user",
                                          client_id="c")
    assert caller.user == acme.owner.user and caller.subject == "user:olivia"
    agent = access.caller_from_principal(tenant=str(acme.tenant.pk), subject="agent:triage-bot", kind="agent",
                                         client_id=acme.agent.client_id)
    assert agent.agent == acme.agent.agent
    person_add(tenant=globex.tenant, username="stranger", password=None)
    refused = [
        ("user:stranger", "user", "c"),  # a person of another workspace
        ("olivia", "user", "c"),  # not a subject the verifier issues
        ("agent:olivia", "user", "c"),  # kind and subject disagree
        ("agent:other-bot", "agent", acme.agent.client_id),  # the client belongs to another agent
        ("agent:triage-bot", "agent", ""),
    ]
    for subject, kind, client_id in refused:
        with pytest.raises(PermissionDenied):
            access.caller_from_principal(tenant=str(acme.tenant.pk), subject=subject, kind=kind, client_id=client_id)


# --------------------------------------------------------------------------- each layer on its own


def test_the_row_check_alone_blocks_what_the_index_query_let_through(acme, shared_fragment, monkeypatch, caplog):
    """Layer 2 on its own: with the SQL predicate bypassed, nothing denied is served,
    and every refused row raises an enforcement alarm."""
    secret = private_fragment(acme.member, "Theo's salary negotiation target is confidential.")
    account = shared_fragment("Initech's salary benchmarks are confidential.", "accounts")
    mine = private_fragment(acme.owner, "My salary review is in April.")
    monkeypatch.setattr(search, "index_filter", lambda policy: Q())
    with caplog.at_level(logging.WARNING, logger="memoryhub.enforcement"):
        served = _served(acme.owner, "salary confidential")
    assert served == {str(mine.pk)}
    alarmed = set(EnforcementAlarm.objects.values_list("fragment_id", flat=True))
    assert {secret.pk, account.pk} <= alarmed
    assert str(secret.pk) in caplog.text
    assert "row check refused" in caplog.text


def test_the_index_predicate_alone_excludes_what_may_not_be_seen(acme, shared_fragment, monkeypatch):
    """Layer 1 on its own: with the row check switched off, the SQL still excludes."""
    secret = private_fragment(acme.member, "Theo's salary negotiation target is confidential.")
    shared_fragment("Initech's salary benchmarks are confidential.", "accounts")
    mine = private_fragment(acme.owner, "My salary review is in April.")
    monkeypatch.setattr(search, "row_refusal", lambda policy, fragment: None)
    assert _served(acme.owner, "salary confidential") == {str(mine.pk)}
    assert str(secret.pk) not in _served(acme.outsider, "salary confidential")
    assert not EnforcementAlarm.objects.exists()


def test_no_alarm_when_the_layers_agree(acme, shared_fragment):
    shared_fragment("Initech's salary benchmarks are confidential.", "accounts")
    private_fragment(acme.member, "Theo's salary negotiation target is confidential.")
    _served(acme.owner, "salary confidential")
    assert not EnforcementAlarm.objects.exists()
