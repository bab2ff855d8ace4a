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
    make_token,
)

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
