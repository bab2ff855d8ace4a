"""memoryhub.mcp_adapter.verifier (over memoryhub.oauth.tokens): what a token is worth at the MCP endpoint."""

from __future__ import annotations

import pytest
from asgiref.sync import async_to_sync
from oauth2_provider.models import Application

from memoryhub.mcp_adapter.verifier import DatabaseTokenVerifier
from memoryhub.oauth.tokens import VerifiedToken, token_verified
from memoryhub.services.agents import agent_revoke
from tests.oauth.conftest import (
    TEST_ORIGIN,
    authorization_code,
    client_credentials,
    exchange_code,
)
from tests.support.tokens import make_token

FULL = f"{TEST_ORIGIN}/mcp"
READONLY = f"{TEST_ORIGIN}/mcp/readonly"

# The verifier answers from a worker thread with its own connection: rows must be committed.
pytestmark = pytest.mark.django_db(transaction=True)


def verify(token: str, resource: str = FULL):
    return async_to_sync(DatabaseTokenVerifier().verify)(token, resource=resource)


def test_a_persons_token_resolves_to_tenant_subject_kind_and_scopes(people, mcp_client):
    code, verifier = authorization_code(people.bruno, mcp_client, scope="memory.read memory.audit")
    token = exchange_code(mcp_client, code, verifier)["access_token"]
    principal = verify(token)
    assert principal.tenant == str(people.bruno.tenant_id)
    assert principal.subject == "user:bruno"
    assert principal.kind == "user"
    assert principal.scopes == frozenset({"memory.read", "memory.audit"})
    assert principal.client_id == mcp_client.client_id
    assert principal.resource == FULL
    assert principal.credential == token


def test_the_adapters_principal_is_the_domains_verified_token_plus_the_credential(people, mcp_client):
    """memoryhub.oauth.tokens decides; the MCP adapter only adds the credential it was given."""
    code, verifier = authorization_code(people.bruno, mcp_client, scope="memory.read memory.write")
    token = exchange_code(mcp_client, code, verifier)["access_token"]
    verified = token_verified(token, resource=FULL)
    assert verified == VerifiedToken(tenant=str(people.acme.pk), subject="user:bruno", kind="user",
                                     scopes=frozenset({"memory.read", "memory.write"}),
                                     client_id=mcp_client.client_id, resource=FULL)
    assert not hasattr(verified, "credential")
    principal = verify(token)
    assert (principal.tenant, principal.subject, principal.kind, principal.scopes, principal.client_id,
            principal.resource) == (verified.tenant, verified.subject, verified.kind, verified.scopes,
                                    verified.client_id, verified.resource)
    assert token_verified(token, resource=READONLY) is None


def test_an_agents_token_resolves_to_its_workspace_and_name(people):
    bot = people.triage_bot
    token = client_credentials(bot.client_id, bot.client_secret)["access_token"]
    principal = verify(token)
    assert (principal.tenant, principal.subject, principal.kind) == (str(people.ada.tenant_id), "agent:triage-bot",
                                                                     "agent")
    assert principal.scopes == frozenset({"memory.read", "memory.write"})
    assert principal.client_id == bot.client_id


def test_an_expired_token_is_refused(people, mcp_client):
    token = make_token(application=mcp_client, user=people.bruno, scope="memory.read", resource=[FULL],
                       expires_in=-1)
    assert verify(token) is None


def test_a_token_for_another_resource_is_refused_everywhere(people, mcp_client):
    token = make_token(application=mcp_client, user=people.bruno, scope="memory.read",
                       resource=["https://elsewhere.example/mcp"])
    assert verify(token, FULL) is None
    assert verify(token, READONLY) is None


def test_a_readonly_token_is_refused_at_the_full_endpoint_and_back(people, mcp_client):
    readonly = make_token(application=mcp_client, user=people.bruno, scope="memory.read", resource=[READONLY])
    full = make_token(application=mcp_client, user=people.bruno, scope="memory.read", resource=[FULL])
    assert verify(readonly, FULL) is None
    assert verify(readonly, READONLY).resource == READONLY
    # DOT's own check is a prefix match; ours is exact.
    assert verify(full, READONLY) is None


def test_a_token_without_an_audience_is_refused(people, mcp_client):
    token = make_token(application=mcp_client, user=people.bruno, scope="memory.read", resource=[])
    assert verify(token) is None


def test_a_token_without_a_memory_scope_is_refused(people, mcp_client):
    token = make_token(application=mcp_client, user=people.bruno, scope="introspection", resource=[FULL])
    assert verify(token) is None


def test_internal_scopes_never_reach_the_principal(people, mcp_client):
    token = make_token(application=mcp_client, user=people.bruno, scope="memory.read ingest registration",
                       resource=[FULL])
    assert verify(token).scopes == frozenset({"memory.read"})


def test_a_registration_token_opens_nothing(people, client):
    response = client.post("/o/register/", {"redirect_uris": ["http://127.0.0.1:7000/cb"]},
                           content_type="application/json")
    registration_token = response.json()["registration_access_token"]
    assert verify(registration_token) is None
    assert verify(registration_token, READONLY) is None


def test_a_sources_ingest_token_opens_nothing(people):
    source = people.wiki_credentials
    token = client_credentials(source.client_id, source.client_secret)["access_token"]
    assert verify(token) is None


def test_an_agent_never_carries_memory_audit(people):
    bot = people.triage_bot
    token = make_token(application=Application.objects.get(client_id=bot.client_id), user=None,
                       scope="memory.read memory.audit", resource=[FULL])
    assert verify(token).scopes == frozenset({"memory.read"})


def test_an_agent_loses_scopes_its_admin_withdrew(people):
    bot = people.triage_bot
    token = client_credentials(bot.client_id, bot.client_secret)["access_token"]
    bot.agent.scopes = "memory.read"
    bot.agent.save()
    assert verify(token).scopes == frozenset({"memory.read"})


def test_a_revoked_agents_token_is_refused(people):
    bot = people.triage_bot
    token = client_credentials(bot.client_id, bot.client_secret)["access_token"]
    agent_revoke(caller=people.caller(people.ada), name="triage-bot")
    assert verify(token) is None


def test_a_deactivated_person_is_refused(people, mcp_client):
    token = make_token(application=mcp_client, user=people.bruno, scope="memory.read", resource=[FULL])
    people.bruno.is_active = False
    people.bruno.save()
    assert verify(token) is None


def test_a_person_who_left_the_workspace_is_refused(people, mcp_client):
    token = make_token(application=mcp_client, user=people.bruno, scope="memory.read", resource=[FULL])
    people.bruno.membership.delete()
    assert verify(token) is None


def test_a_person_in_no_workspace_is_refused(people, mcp_client):
    token = make_token(application=mcp_client, user=people.nomad, scope="memory.read", resource=[FULL])
    assert verify(token) is None


def test_unknown_empty_and_oversized_tokens_are_refused(people):
    assert verify("no-such-token") is None
    assert verify("") is None
    assert verify("x" * 10_000) is None


def test_the_memory_domain_accepts_the_principals_it_gets(people, mcp_client):
    """The seam with memoryhub.access: a verified principal names a caller there."""
    bot = people.triage_bot
    from memoryhub import access

    person = make_token(application=mcp_client, user=people.bruno, scope="memory.read", resource=[FULL])
    agent = client_credentials(bot.client_id, bot.client_secret)["access_token"]
    for token, expected in ((person, people.bruno), (agent, bot.agent)):
        principal = verify(token)
        caller = access.caller_from_principal(tenant=principal.tenant, subject=principal.subject,
                                              kind=principal.kind, client_id=principal.client_id)
        assert expected in (caller.user, caller.agent)


def _statements(fn):  # type: ignore[no-untyped-def]
    from django.db import connection
    from django.test.utils import CaptureQueriesContext

    with CaptureQueriesContext(connection) as captured:
        result = fn()
    return result, [entry["sql"] for entry in captured.captured_queries]


def test_a_token_and_its_caller_cost_one_statement_each(people, mcp_client):
    """What an MCP request reads before its tool runs: the token with who holds
    it (agent or membership, and their workspace) in one statement, and the
    caller the tool acts as in one more."""
    from memoryhub import access

    bot = people.triage_bot
    person = make_token(application=mcp_client, user=people.bruno, scope="memory.read", resource=[FULL])
    agent = client_credentials(bot.client_id, bot.client_secret)["access_token"]
    for token, expected in ((person, people.bruno), (agent, bot.agent)):
        token_verified(token, resource=FULL)  # its last use is recorded, at most once a minute
        verified, statements = _statements(lambda token=token: token_verified(token, resource=FULL))
        assert verified is not None and len(statements) == 1, statements
        caller, statements = _statements(lambda verified=verified: access.caller_from_principal(
            tenant=verified.tenant, subject=verified.subject, kind=verified.kind, client_id=verified.client_id))
        assert expected in (caller.user, caller.agent) and len(statements) == 1, statements
        assert caller.tenant.pk == people.acme.pk


def test_a_request_admitted_before_a_deactivation_or_a_revocation_is_refused_when_its_tool_runs(
        people, mcp_client):
    """The gateway admits a request before its body arrives (up to
    body_read_seconds later, at the client's pace): the tool's caller is read
    again when the tool runs, so a person deactivated or an agent revoked in
    between is refused then, not served with the rights they were admitted with."""
    from memoryhub import access
    from memoryhub.errors import PermissionDenied
    from memoryhub.mcp_adapter.client import caller_for
    from memoryhub.services.members import member_deactivate

    bot = people.triage_bot
    person = verify(make_token(application=mcp_client, user=people.bruno, scope="memory.read", resource=[FULL]))
    agent = verify(client_credentials(bot.client_id, bot.client_secret)["access_token"])
    assert caller_for(person, operation="memory_search").user == people.bruno
    assert caller_for(agent, operation="memory_search").agent == bot.agent
    admin = access.caller_for_user(user=people.ada)
    member_deactivate(caller=admin, username="bruno")
    agent_revoke(caller=admin, name="triage-bot")
    for principal in (person, agent):
        with pytest.raises(PermissionDenied):
            caller_for(principal, operation="memory_search")


def test_a_principal_names_a_caller_only_while_they_are_entitled(people, mcp_client):
    """caller_from_principal, read in one statement, refuses what token_holder refuses."""
    from memoryhub import access
    from memoryhub.errors import PermissionDenied
    from memoryhub.models import Membership, Tenant

    def caller(tenant: str, subject: str = "user:bruno", kind: str = "user", client_id: str = "c"):
        return access.caller_from_principal(tenant=tenant, subject=subject, kind=kind, client_id=client_id)

    acme = str(people.acme.pk)
    assert caller(acme).user == people.bruno
    assert caller(people.acme.slug).user == people.bruno  # a workspace named by its slug
    with pytest.raises(PermissionDenied, match="workspace does not exist"):
        caller("00000000-0000-0000-0000-000000000000")
    with pytest.raises(PermissionDenied, match="workspace does not exist"):
        caller("no-such-workspace")
    with pytest.raises(PermissionDenied, match="person is not in this workspace"):
        caller(acme, subject="user:nobody")
    # A membership in another workspace than the person's own is no place in it.
    other = Tenant.objects.create(name="Other", slug="other-ws")
    Membership.objects.filter(user=people.bruno).update(tenant=other)
    with pytest.raises(PermissionDenied, match="no active place"):
        caller(acme)
    Membership.objects.filter(user=people.bruno).update(tenant=people.acme)
    assert caller(acme).user == people.bruno
    people.bruno.is_active = False
    people.bruno.save()
    with pytest.raises(PermissionDenied, match="no active place"):
        caller(acme)
    people.bruno.is_active = True
    people.bruno.save()
    people.bruno.membership.delete()
    with pytest.raises(PermissionDenied, match="no active place"):
        caller(acme)
    bot = people.triage_bot
    assert caller(acme, subject="agent:triage-bot", kind="agent", client_id=bot.client_id).agent == bot.agent
    agent_revoke(caller=people.caller(people.ada), name="triage-bot")  # its OAuth client goes with it
    with pytest.raises(PermissionDenied, match="revoked|not registered"):
        caller(acme, subject="agent:triage-bot", kind="agent", client_id=bot.client_id)
