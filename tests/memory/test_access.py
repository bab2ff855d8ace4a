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
from memoryhub.services import access_rules, agents, members, search
from memoryhub.services.search import fragments_search
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
    return set(fragments_search(caller=caller, query=query, limit=50, **kwargs).served_ids)


def test_private_memory_is_readable_by_its_owner_alone(people):
    bruno = people.caller(people.bruno)
    mine = private_fragment(bruno, "My locker code is near the east stairwell.")
    assert _visible_ids(bruno) == {mine.pk}
    others = (people.cleo, people.carol, people.ada, people.triage_bot, people.olga)
    for other in (people.caller(who) for who in others):
        assert mine.pk not in _visible_ids(other)
        assert str(mine.pk) not in _served(other, "locker east stairwell")


def test_it_shows_a_workspace_admin_no_one_elses_private_memory(people):
    mine = private_fragment(people.caller(people.bruno), "I am interviewing with another company next week.")
    assert Membership.objects.get(user=people.ada).is_admin
    assert str(mine.pk) not in _served(people.caller(people.ada), "interviewing with another company")


def test_shared_memory_follows_todays_access_rules(people, shared_fragment):
    runbook = shared_fragment("Restart the payments service with kubectl rollout restart.")
    account = shared_fragment("Initech renews its contract in March.", "accounts")
    bruno, cleo, carol, ada = (people.caller(who) for who in (people.bruno, people.cleo, people.carol, people.ada))
    assert _visible_ids(bruno) == {runbook.pk}
    assert _visible_ids(cleo) == {runbook.pk}
    assert _visible_ids(carol) == {account.pk}
    assert _visible_ids(ada) == {runbook.pk, account.pk}  # engineering + leads

    # Rules are always today's: granting sales the runbooks opens them at once,
    # also for a read of the past.
    before = timezone.now()
    access_rules.access_rule_grant(caller=ada, role="sales", collection="runbooks")
    assert runbook.pk in _visible_ids(carol)
    assert runbook.pk not in _visible_ids(carol, as_of=before - dt.timedelta(days=1))  # not recorded yet


def test_roles_are_looked_up_at_read_time(people, shared_fragment):
    runbook = shared_fragment("Rotate the TLS certificates on the load balancer every quarter.")
    cleo = people.caller(people.cleo)
    assert runbook.pk in _visible_ids(cleo)
    Membership.objects.get(user=people.cleo).roles.clear()
    assert runbook.pk not in _visible_ids(cleo)
    assert access.role_audience(cleo).role_names == ()


def test_nothing_crosses_tenants(people, shared_fragment):
    acme_runbook = shared_fragment("Acme deploys on Tuesdays after the change review.")
    globex_runbook = shared_fragment("Globex deploys on Fridays.", source=people.globex_wiki)
    # Same role and collection names in both tenants: still nothing crosses.
    assert _visible_ids(people.caller(people.bruno)) == {acme_runbook.pk}
    assert _visible_ids(people.caller(people.olga)) == {globex_runbook.pk}
    assert str(acme_runbook.pk) not in _served(people.caller(people.olga), "deploys Tuesdays change review")


def test_an_agent_reads_a_connected_source_only_when_it_names_it(people, shared_fragment):
    runbook = shared_fragment("Page the database on-call when replication lag exceeds 30 seconds.")
    bot = people.caller(people.triage_bot)
    assert runbook.pk not in _visible_ids(bot)
    assert runbook.pk in _visible_ids(bot, agents=["wiki"])
    assert str(runbook.pk) not in _served(bot, "replication lag on-call")
    assert str(runbook.pk) in _served(bot, "replication lag on-call", agents=["wiki"])
    # People see it through the access rules without naming anything.
    assert runbook.pk in _visible_ids(people.caller(people.bruno))


def test_naming_a_source_never_goes_beyond_the_access_rules(people, shared_fragment):
    account = shared_fragment("Initech's champion is their VP of Operations.", "accounts")
    # triage-bot holds engineering only; accounts are for sales and leads.
    assert account.pk not in _visible_ids(people.caller(people.triage_bot), agents=["wiki"])


def test_agents_filter_only_narrows(people, shared_fragment):
    bruno = people.caller(people.bruno)
    runbook = shared_fragment("The staging cluster is rebuilt every Sunday night.")
    mine = private_fragment(bruno, "I keep my staging notes in the team wiki.")
    everything = _visible_ids(bruno)
    assert everything == {runbook.pk, mine.pk}
    assert _visible_ids(bruno, agents=["wiki"]) == {runbook.pk}
    assert _visible_ids(bruno, agents=["no-such-agent"]) == set()
    assert _visible_ids(bruno, agents=["wiki", "no-such-agent"]) <= everything


def test_an_agents_private_memory_is_its_own(people):
    other = agents.agent_register(caller=people.caller(people.ada), name="other-bot", scopes=["memory.read"],
                                  roles=["engineering"])
    bot = people.caller(people.triage_bot)
    bot_note = private_fragment(bot, "Triage rotation starts with the newest ticket.")
    assert bot_note.pk in _visible_ids(bot)
    assert bot_note.pk not in _visible_ids(access.caller_for_agent(agent=other.agent))
    assert bot_note.pk not in _visible_ids(people.caller(people.ada))


def test_as_of_reads_the_memory_as_it_stood(people):
    bruno = people.caller(people.bruno)
    t0 = timezone.now() - dt.timedelta(days=10)
    old = private_fragment(bruno, "The standup is at 9:30.", recorded_at=t0)
    new = private_fragment(bruno, "The standup is at 10:00.", recorded_at=t0 + dt.timedelta(days=5))
    Fragment.objects.filter(pk=old.pk).update(retired_at=new.recorded_at, retired_reason="superseded",
                                              successor=new)
    assert _visible_ids(bruno, as_of=t0 - dt.timedelta(seconds=1)) == set()
    assert _visible_ids(bruno, as_of=t0) == {old.pk}  # recorded at T: visible at T
    assert _visible_ids(bruno, as_of=new.recorded_at - dt.timedelta(microseconds=1)) == {old.pk}
    assert _visible_ids(bruno, as_of=new.recorded_at) == {new.pk}  # retired at T: gone at T
    assert _visible_ids(bruno) == {new.pk}


def test_created_and_resource_filters_narrow(people, shared_fragment):
    bruno = people.caller(people.bruno)
    jan = shared_fragment("Q1 planning notes.", created_at=dt.datetime(2026, 1, 10, tzinfo=dt.UTC),
                          resources=[{"id": "doc-1", "title": "Q1 plan", "uri": "https://wiki.example/q1"}])
    jun = shared_fragment("Q3 planning notes.", created_at=dt.datetime(2026, 6, 10, tzinfo=dt.UTC))
    feb = dt.datetime(2026, 2, 1, tzinfo=dt.UTC)
    assert _visible_ids(bruno, created_after=feb) == {jun.pk}
    assert _visible_ids(bruno, created_before=feb) == {jan.pk}
    assert _visible_ids(bruno, resource_ids=["doc-1"]) == {jan.pk}
    assert _visible_ids(bruno, resource_ids=["doc-unknown"]) == set()


def test_a_revoked_agent_or_a_source_identity_is_refused(people):
    revoked = agents.agent_revoke(caller=people.caller(people.ada), name="triage-bot")
    assert revoked.revoked_at is not None
    with pytest.raises(PermissionDenied):
        access.caller_for_agent(agent=revoked)
    with pytest.raises(PermissionDenied):
        access.caller_for_agent(agent=people.wiki.agent)


def test_the_principal_must_belong_to_its_tenant(people):
    acme, globex, bot_client = str(people.acme.pk), str(people.globex.pk), people.triage_bot.client_id
    with pytest.raises(PermissionDenied):
        access.caller_from_principal(tenant=globex, subject="user:bruno", kind="user", client_id="x")
    with pytest.raises(PermissionDenied):
        access.caller_from_principal(tenant=globex, subject="agent:triage-bot", kind="agent", client_id=bot_client)
    caller = access.caller_from_principal(tenant=acme, subject="user:bruno", kind="user", client_id="c")
    assert caller.user == people.bruno and caller.subject == "user:bruno"
    agent = access.caller_from_principal(tenant=acme, subject="agent:triage-bot", kind="agent", client_id=bot_client)
    assert agent.agent == people.triage_bot.agent
    members.member_add(caller=people.system(people.globex), username="stranger", password=None)
    refused = [
        ("user:stranger", "user", "c"),  # a person of another workspace
        ("bruno", "user", "c"),  # not a subject the verifier issues
        ("agent:bruno", "user", "c"),  # kind and subject disagree
        ("agent:other-bot", "agent", bot_client),  # the client belongs to another agent
        ("agent:triage-bot", "agent", ""),
    ]
    for subject, kind, client_id in refused:
        with pytest.raises(PermissionDenied):
            access.caller_from_principal(tenant=acme, subject=subject, kind=kind, client_id=client_id)


# --------------------------------------------------------------------------- each layer on its own


def test_the_row_check_alone_blocks_what_the_index_query_let_through(people, shared_fragment, monkeypatch, caplog):
    """Layer 2 on its own: with the SQL predicate bypassed, nothing denied is served,
    and every refused row raises an enforcement alarm."""
    secret = private_fragment(people.caller(people.cleo), "Cleo's salary negotiation target is confidential.")
    account = shared_fragment("Initech's salary benchmarks are confidential.", "accounts")
    mine = private_fragment(people.caller(people.bruno), "My salary review is in April.")
    monkeypatch.setattr(search, "index_filter", lambda policy: Q())
    with caplog.at_level(logging.WARNING, logger="memoryhub.enforcement"):
        served = _served(people.caller(people.bruno), "salary confidential")
    assert served == {str(mine.pk)}
    alarmed = set(EnforcementAlarm.objects.values_list("fragment_id", flat=True))
    assert {secret.pk, account.pk} <= alarmed
    assert str(secret.pk) in caplog.text
    assert "row check refused" in caplog.text


def test_the_index_predicate_alone_excludes_what_may_not_be_seen(people, shared_fragment, monkeypatch):
    """Layer 1 on its own: with the row check switched off, the SQL still excludes."""
    secret = private_fragment(people.caller(people.cleo), "Cleo's salary negotiation target is confidential.")
    shared_fragment("Initech's salary benchmarks are confidential.", "accounts")
    mine = private_fragment(people.caller(people.bruno), "My salary review is in April.")
    monkeypatch.setattr(search, "row_check", lambda policy, names, **read: lambda values: None)
    assert _served(people.caller(people.bruno), "salary confidential") == {str(mine.pk)}
    assert str(secret.pk) not in _served(people.caller(people.carol), "salary confidential")
    assert not EnforcementAlarm.objects.exists()


def test_no_alarm_when_the_layers_agree(people, shared_fragment):
    shared_fragment("Initech's salary benchmarks are confidential.", "accounts")
    private_fragment(people.caller(people.cleo), "Cleo's salary negotiation target is confidential.")
    _served(people.caller(people.bruno), "salary confidential")
    assert not EnforcementAlarm.objects.exists()
