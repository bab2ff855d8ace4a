"""Every "who may" decision, one test (or a few) per function of
memoryhub/access.py that makes it, with the personas: an owner (bruno), a
teammate with the same roles (cleo), a member with other roles (carol), an
admin (ada), an agent (triage-bot), a connected source (wiki), the system
caller, and another workspace (olga of globex). docs/architecture.md maps each
decision to its function and these tests; the visibility rule tree itself is
tested in tests/memory/test_access*.py, document links in
tests/access/test_document_links.py.
"""

from __future__ import annotations

from datetime import timedelta

import pytest
from django.contrib.auth.models import AnonymousUser
from django.utils import timezone
from oauth2_provider.models import Application

from contract.scopes import MEMORY_SCOPES, OPERATION_SCOPES
from memoryhub import access
from memoryhub.errors import PermissionDenied
from memoryhub.models import Fragment, Membership, Receipt
from memoryhub.services import members
from memoryhub.services.fragments import fragment_write
from memoryhub.services.ingest import fragment_ingest
from memoryhub.services.proposals import proposal_get
from memoryhub.services.search import fragments_search

# --------------------------------------------------------------------------- callers


def test_caller_for_user_refuses_a_deactivated_person_and_one_of_no_workspace(people):
    assert access.caller_for_user(user=people.bruno).tenant == people.acme
    people.bruno.is_active = False
    people.bruno.save()
    with pytest.raises(PermissionDenied):
        access.caller_for_user(user=people.bruno)
    with pytest.raises(PermissionDenied):
        access.caller_for_user(user=people.nomad)


def test_caller_for_user_refuses_a_person_whose_membership_is_gone(people):
    Membership.objects.filter(user=people.carol).delete()
    with pytest.raises(PermissionDenied):
        access.caller_for_user(user=people.carol)


def test_caller_for_agent_refuses_a_revoked_agent_and_a_connected_source(people):
    agent = people.triage_bot.agent
    assert access.caller_for_agent(agent=agent).kind == "agent"
    with pytest.raises(PermissionDenied):
        access.caller_for_agent(agent=people.wiki.agent)
    agent.revoked_at = timezone.now()
    agent.save()
    with pytest.raises(PermissionDenied):
        access.caller_for_agent(agent=agent)


def test_caller_from_principal_never_resolves_a_subject_to_another_workspace(people):
    globex = str(people.globex.pk)
    # ada exists in acme only: a globex token naming her is refused, not resolved to anyone.
    with pytest.raises(PermissionDenied):
        access.caller_from_principal(tenant=globex, subject="user:ada", kind="user", client_id="x")
    # An agent is found by its own client: the right name with another client is refused.
    with pytest.raises(PermissionDenied):
        access.caller_from_principal(tenant=str(people.acme.pk), subject="agent:triage-bot", kind="agent",
                                     client_id=people.globex_bot.client_id)
    caller = access.caller_from_principal(tenant=str(people.acme.pk), subject="agent:triage-bot", kind="agent",
                                          client_id=people.triage_bot.client_id)
    assert caller.agent == people.triage_bot.agent
    with pytest.raises(PermissionDenied):
        access.caller_from_principal(tenant=str(people.acme.pk), subject="user:bruno", kind="agent", client_id="x")


def test_admin_named_is_an_admin_of_that_workspace_only(people):
    assert access.admin_named(tenant=people.acme, username="ADA").user == people.ada
    for tenant, name in ((people.acme, "bruno"), (people.acme, "olga"), (people.globex, "ada")):
        with pytest.raises(PermissionDenied):
            access.admin_named(tenant=tenant, username=name)


# --------------------------------------------------------------------------- credentials


def _person_app() -> Application:
    return Application.objects.create(
        name="notes", client_type=Application.CLIENT_PUBLIC,
        authorization_grant_type=Application.GRANT_AUTHORIZATION_CODE, redirect_uris="http://127.0.0.1/cb",
    )


def test_token_holder_is_live_while_the_person_or_agent_is(people):
    app = _person_app()
    holder = access.token_holder(application=app, user=people.bruno)
    assert holder is not None and holder.kind == "user" and holder.subject == "user:bruno"
    assert holder.scopes == frozenset(MEMORY_SCOPES)
    agent_app = people.triage_bot.agent.application
    agent_holder = access.token_holder(application=agent_app, user=None)
    assert agent_holder is not None and agent_holder.kind == "agent"
    assert agent_holder.scopes == {"memory.read", "memory.write"}  # never memory.audit
    source_holder = access.token_holder(application=people.wiki.agent.application, user=None)
    assert source_holder is not None and source_holder.kind == "source"
    assert source_holder.scopes == {access.INGEST_SCOPE} and source_holder.agent.source == people.wiki

    people.bruno.is_active = False
    people.bruno.save()
    assert access.token_holder(application=app, user=people.bruno) is None
    assert access.token_holder(application=app, user=people.nomad) is None
    assert access.token_holder(application=app, user=None) is None
    agent = people.triage_bot.agent
    agent.revoked_at = timezone.now()
    agent.save()
    assert access.token_holder(application=agent_app, user=None) is None


def test_the_admin_scope_and_the_memory_scopes_never_share_a_token(people):
    admin = access.ADMIN_SCOPE
    assert access.audience_refusal([admin], admin_api=True, user=people.ada) is None
    assert access.audience_refusal([admin], admin_api=True, before_consent=True) is None
    assert access.audience_refusal(["memory.read"], admin_api=False) is None
    for scopes in ([], ["memory.read"], [admin, "memory.read"]):
        assert access.audience_refusal(scopes, admin_api=True, user=people.ada) is not None, scopes
    for scopes in ([admin], [admin, "memory.read"]):
        assert access.audience_refusal(scopes, admin_api=False) is not None, scopes


def test_the_admin_scope_goes_only_to_a_live_admin_of_the_workspace_now(people):
    admin = [access.ADMIN_SCOPE]
    refused = [None, people.bruno, people.nomad, AnonymousUser()]
    assert all(access.audience_refusal(admin, admin_api=True, user=user) for user in refused)
    people.ada.is_active = False
    people.ada.save()
    assert access.audience_refusal(admin, admin_api=True, user=people.ada) is not None
    assert access.audience_refusal(admin, admin_api=True, user=people.olga) is None  # globex's admin


def test_the_admin_api_caller_is_a_live_admin_of_the_workspace_now(people):
    app, admin = _person_app(), [access.ADMIN_SCOPE]
    caller = access.admin_api_caller(application=app, user=people.ada, granted=admin, client_id="c")
    assert caller is not None and caller.user == people.ada and caller.tenant == people.acme
    with pytest.raises(access.InsufficientScope):
        access.admin_api_caller(application=app, user=people.ada, granted=["memory.read"])
    with pytest.raises(PermissionDenied):
        access.admin_api_caller(application=app, user=people.bruno, granted=admin)
    # No holder: an agent's or a source's client, or a person who left.
    assert access.admin_api_caller(application=people.triage_bot.agent.application, user=None, granted=admin) is None
    assert access.admin_api_caller(application=people.wiki.agent.application, user=None, granted=admin) is None
    assert access.admin_api_caller(application=app, user=people.nomad, granted=admin) is None
    dora = members.member_add(caller=people.system(), username="dora", password=None, is_admin=True)
    members.member_deactivate(caller=access.caller_for_user(user=dora), user_id=people.ada.pk)
    people.ada.refresh_from_db()
    assert access.admin_api_caller(application=app, user=people.ada, granted=admin) is None


def test_grantable_scopes_per_kind_of_client(people):
    assert access.grantable_scopes(None) == frozenset(MEMORY_SCOPES)
    assert access.grantable_scopes(_person_app()) == {*MEMORY_SCOPES, access.ADMIN_SCOPE}
    assert access.grantable_scopes(people.triage_bot.agent.application) == {"memory.read", "memory.write"}
    assert access.grantable_scopes(people.wiki.agent.application) == {access.INGEST_SCOPE}
    lone = Application.objects.create(name="lone", client_type=Application.CLIENT_CONFIDENTIAL,
                                      authorization_grant_type=Application.GRANT_CLIENT_CREDENTIALS)
    assert access.grantable_scopes(lone) == frozenset()
    people.triage_bot.agent.scopes = "memory.read memory.audit"
    people.triage_bot.agent.save()
    assert access.grantable_scopes(people.triage_bot.agent.application) == {"memory.read"}


@pytest.mark.parametrize("operation", sorted(OPERATION_SCOPES))
def test_require_scope_follows_the_contract_table(operation):
    needed = OPERATION_SCOPES[operation]
    access.require_scope(frozenset(MEMORY_SCOPES), operation)
    if needed is None:
        access.require_scope(frozenset(), operation)
        return
    with pytest.raises(access.InsufficientScope) as refused:
        access.require_scope(frozenset(MEMORY_SCOPES) - {needed}, operation)
    assert refused.value.scope == needed and refused.value.code == "insufficient_scope"


def test_the_scope_table_has_one_entry_per_tool():
    from mcpapi.catalog import CATALOG

    assert {spec.name: spec.required_scope for spec in CATALOG} == OPERATION_SCOPES


# --------------------------------------------------------------------------- what a caller may do


def test_is_admin_and_require_admin(people):
    assert access.is_admin(people.caller(people.ada))
    assert access.is_admin(people.system())
    for who in (people.bruno, people.carol, people.triage_bot):
        assert not access.is_admin(people.caller(who))
        with pytest.raises(PermissionDenied):
            access.require_admin(people.caller(who))
    # An admin administers their own workspace: olga reaches nothing of acme's.
    assert access.require_admin(people.caller(people.olga)) == people.globex
    with pytest.raises(Exception, match="No such person"):
        members.member_get(caller=people.caller(people.olga), user_id=people.bruno.pk)


def test_require_operator_is_the_deployment_only(people):
    access.require_operator(access.OPERATOR)
    with pytest.raises(PermissionDenied):
        access.require_operator(people.caller(people.ada))  # type: ignore[arg-type]


def test_require_person_refuses_agents_and_the_system(people):
    assert access.require_person(people.caller(people.bruno)) == people.bruno
    for caller in (people.caller(people.triage_bot), people.system()):
        with pytest.raises(PermissionDenied):
            access.require_person(caller)


def test_require_reviewer_is_an_admin_and_never_an_agent(people):
    access.require_reviewer(people.caller(people.ada))
    for who in (people.bruno, people.triage_bot):
        with pytest.raises(PermissionDenied):
            access.require_reviewer(people.caller(who))


def test_require_decider_refuses_agents_members_and_another_workspaces_proposal(people):
    outcome = fragment_write(caller=people.caller(people.triage_bot), content="Deploys freeze on Fridays.")
    proposal = proposal_get(caller=people.caller(people.ada), proposal_id=outcome.proposal_id)
    access.require_decider(people.caller(people.ada), proposal)
    for caller in (people.caller(people.triage_bot), people.caller(people.bruno), people.caller(people.olga),
                   people.system()):
        with pytest.raises(PermissionDenied):
            access.require_decider(caller, proposal)


def test_owns_fragment_and_own_fragments_include_retired_rows_and_nothing_else(people):
    bruno = people.caller(people.bruno)
    fragment_write(caller=bruno, content="My desk is by the window.")
    fragment_write(caller=bruno, content="My desk is by the door.")  # supersedes the first
    fragment_write(caller=people.caller(people.cleo), content="My desk is in room 4.")
    shared, _ = fragment_ingest(source=people.wiki, value="Desks are booked in the office app.")
    own = list(Fragment.objects.filter(access.own_fragments(bruno)))
    assert len(own) == 2 and any(f.retired_at is not None for f in own)
    assert all(access.owns_fragment(bruno, f) for f in own)
    assert not access.owns_fragment(bruno, shared)
    assert not access.owns_fragment(people.caller(people.cleo), own[0])
    assert not Fragment.objects.filter(access.own_fragments(people.system())).exists()


def test_own_receipts_are_a_persons_own_reads(people):
    fragments_search(caller=people.caller(people.bruno), query="desk")
    fragments_search(caller=people.caller(people.cleo), query="desk")
    mine = Receipt.objects.filter(access.own_receipts(people.caller(people.bruno)))
    assert mine.count() == 1 and mine.get().reader_user == people.bruno
    for caller in (people.caller(people.triage_bot), people.system()):
        with pytest.raises(PermissionDenied):
            access.own_receipts(caller)


def test_agent_memory_for_review_is_for_reviewers(people):
    access.agent_memory_for_review(people.caller(people.ada), people.triage_bot.agent)
    with pytest.raises(PermissionDenied):
        access.agent_memory_for_review(people.caller(people.bruno), people.triage_bot.agent)


# --------------------------------------------------------------------------- what a caller may see


def test_the_system_caller_reads_no_memory(people):
    with pytest.raises(PermissionDenied):
        access.read_policy(caller=people.system(), as_of=timezone.now())
    assert access.visibility_rule(caller=people.system(), audience=access.role_audience(people.system()),
                                  as_of=timezone.now()).q() is not None
    with pytest.raises(PermissionDenied):
        fragments_search(caller=people.system(), query="anything")


def test_fragments_shown_to_a_person_own_or_readable_now(people):
    bruno, carol = people.caller(people.bruno), people.caller(people.carol)
    fragment_write(caller=bruno, content="My laptop is a ThinkPad.")
    mine = Fragment.objects.get(owner_user=people.bruno)
    runbook, _ = fragment_ingest(source=people.wiki, value="Laptops are reimaged every year.")
    rows = list(access.with_access_facts(Fragment.objects.filter(pk__in=[mine.pk, runbook.pk])))
    assert {f.pk for f in access.fragments_shown_to(bruno, rows)} == {mine.pk, runbook.pk}
    assert access.fragments_shown_to(carol, rows) == []  # sales reads no runbooks, and not bruno's memory
    mine.retired_at, mine.retired_reason = timezone.now() - timedelta(seconds=1), "forgotten"
    mine.save()
    assert {f.pk for f in access.fragments_shown_to(bruno, rows)} >= {mine.pk}


def test_may_read_collection_follows_todays_rules(people):
    runbooks, accounts = people.collection("runbooks"), people.collection("accounts")
    bruno, carol, ada = (people.caller(u) for u in (people.bruno, people.carol, people.ada))
    assert access.may_read_collection(bruno, runbooks) and not access.may_read_collection(bruno, accounts)
    assert access.may_read_collection(carol, accounts) and not access.may_read_collection(carol, runbooks)
    assert access.may_read_collection(ada, accounts)
    assert not access.may_read_collection(people.system(), runbooks)
    assert not access.may_read_collection(people.caller(people.olga), runbooks)  # acme's, not globex's
    assert access.may_read_collection(people.caller(people.triage_bot), runbooks)
