"""workspace.admin: a person's client only, for the REST admin API's resource
only, and that resource for workspace.admin only."""

from __future__ import annotations

import json

import pytest
from django.test import Client
from oauth2_provider.models import AccessToken, Grant

from memoryhub.models import Membership
from memoryhub.services import members
from tests.conftest import signed_in
from tests.oauth.conftest import (
    TEST_ORIGIN,
    authorization_code,
    authorize_url,
    client_credentials,
    consent,
    exchange_code,
    pkce_pair,
    redirect_query,
    refresh,
    stored_token,
)

ADMIN = "workspace.admin"
ADMIN_API = f"{TEST_ORIGIN}/api/admin"


def test_a_person_gets_an_admin_token_for_the_admin_api_alone(people, mcp_client):
    code, verifier = authorization_code(people.ada, mcp_client, scope=ADMIN, resource=ADMIN_API)
    token = exchange_code(mcp_client, code, verifier)
    assert token["status"] == 200 and token["scope"] == ADMIN
    assert stored_token(token["access_token"]).resource == [ADMIN_API]
    renewed = refresh(mcp_client, token["refresh_token"])
    assert renewed["status"] == 200 and renewed["scope"] == ADMIN
    assert stored_token(renewed["access_token"]).resource == [ADMIN_API]


def test_naming_the_admin_api_alone_asks_for_the_admin_scope(people, mcp_client):
    code, verifier = authorization_code(people.ada, mcp_client, scope=None, resource=ADMIN_API)
    token = exchange_code(mcp_client, code, verifier)
    assert token["status"] == 200 and token["scope"] == ADMIN


@pytest.mark.parametrize(("scope", "resource"), [
    (ADMIN, f"{TEST_ORIGIN}/mcp"),
    (ADMIN, None),  # no resource named: /mcp
    (f"{ADMIN} memory.read", f"{TEST_ORIGIN}/mcp"),
    ("memory.read", ADMIN_API),
    (f"{ADMIN} memory.read", ADMIN_API),
])
def test_the_admin_scope_and_the_memory_scopes_are_never_issued_together_or_crosswise(people, mcp_client, scope,
                                                                                       resource):
    _, challenge = pkce_pair()
    params = redirect_query(signed_in(people.ada).get(authorize_url(mcp_client, challenge, scope=scope,
                                                                    resource=resource)))
    assert params["error"] == "invalid_scope"
    assert "code" not in params


@pytest.mark.parametrize("extra", [{"scope": ADMIN}, {"scope": f"memory.read {ADMIN}"}, {"resource": ADMIN_API},
                                   {"scope": ADMIN, "resource": ADMIN_API}])
def test_an_agent_never_obtains_the_admin_scope(people, extra):
    bot = people.triage_bot
    answer = client_credentials(bot.client_id, bot.client_secret, **extra)
    assert answer["status"] == 400, answer
    assert answer["error"] in ("invalid_scope", "invalid_target")
    assert "access_token" not in answer


@pytest.mark.parametrize("extra", [{"scope": ADMIN}, {"scope": f"ingest {ADMIN}"}, {"resource": ADMIN_API},
                                   {"scope": ADMIN, "resource": ADMIN_API}])
def test_a_source_never_obtains_the_admin_scope(people, extra):
    credentials = people.wiki_credentials
    answer = client_credentials(credentials.client_id, credentials.client_secret, **extra)
    assert answer["status"] == 400, answer
    assert answer["error"] in ("invalid_scope", "invalid_target")
    assert "access_token" not in answer


def test_a_client_may_register_for_the_admin_scope(db):
    response = Client().post("/o/register/", json.dumps({
        "client_name": "Admin script", "redirect_uris": ["http://127.0.0.1:8765/callback"], "scope": ADMIN,
    }), content_type="application/json")
    assert response.status_code == 201, response.content


def test_a_member_who_is_not_an_admin_is_not_issued_the_admin_scope(people, mcp_client):
    _, challenge = pkce_pair()
    answer = redirect_query(consent(signed_in(people.bruno), mcp_client, challenge, scope=ADMIN, resource=ADMIN_API))
    assert answer["error"] == "invalid_scope" and "code" not in answer
    assert not AccessToken.objects.filter(user=people.bruno).exists()


def test_an_admin_demoted_before_the_exchange_gets_no_token(people, mcp_client):
    code, verifier = authorization_code(people.ada, mcp_client, scope=ADMIN, resource=ADMIN_API)
    # The flag changed under the code (written straight, so the code is not ended with it).
    Membership.objects.filter(user=people.ada).update(is_admin=False)
    answer = exchange_code(mcp_client, code, verifier)
    assert answer["status"] == 400 and answer["error"] == "invalid_scope", answer
    assert not AccessToken.objects.filter(user=people.ada, scope=ADMIN).exists()


def test_a_demoted_admin_refreshes_no_more(people, mcp_client):
    code, verifier = authorization_code(people.ada, mcp_client, scope=ADMIN, resource=ADMIN_API)
    token = exchange_code(mcp_client, code, verifier)
    Membership.objects.filter(user=people.ada).update(is_admin=False)
    answer = refresh(mcp_client, token["refresh_token"])
    assert answer["status"] == 400 and "access_token" not in answer, answer
    Membership.objects.filter(user=people.ada).update(is_admin=True)


def test_demoting_an_admin_ends_their_admin_credentials_and_nothing_else(people, mcp_client):
    caller = people.caller(people.ada)
    members.member_update(caller=caller, user_id=people.cleo.pk, is_admin=True)
    code, verifier = authorization_code(people.cleo, mcp_client, scope=ADMIN, resource=ADMIN_API)
    admin = exchange_code(mcp_client, code, verifier)
    code, verifier = authorization_code(people.cleo, mcp_client, scope="memory.read")
    memory = exchange_code(mcp_client, code, verifier)
    authorization_code(people.cleo, mcp_client, scope=ADMIN, resource=ADMIN_API)  # a code not yet exchanged
    members.member_set_admin(caller=caller, user_id=people.cleo.pk, is_admin=False)
    assert not AccessToken.objects.filter(user=people.cleo, scope=ADMIN).exists()
    assert not Grant.objects.filter(user=people.cleo, scope=ADMIN).exists()
    members.member_set_admin(caller=caller, user_id=people.cleo.pk, is_admin=True)
    assert refresh(mcp_client, admin["refresh_token"])["status"] == 400  # revived by nothing
    assert stored_token(memory["access_token"]) is not None  # her memory app is untouched
    assert refresh(mcp_client, memory["refresh_token"])["status"] == 200


def test_the_consent_page_offers_a_member_no_allow_for_the_admin_api(people, mcp_client):
    _, challenge = pkce_pair()
    url = authorize_url(mcp_client, challenge, scope=ADMIN, resource=ADMIN_API)
    member = signed_in(people.bruno).get(url).content.decode()
    assert 'id="admin-refusal"' in member and 'name="allow"' not in member
    admin = signed_in(people.ada).get(url).content.decode()
    assert 'id="admin-refusal"' not in admin and 'name="allow"' in admin
