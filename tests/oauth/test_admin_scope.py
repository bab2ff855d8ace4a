"""workspace.admin: a person's client only, for the REST admin API's resource
only, and that resource for workspace.admin only."""

from __future__ import annotations

import json

import pytest
from django.test import Client

from tests.conftest import signed_in
from tests.oauth.conftest import (
    TEST_ORIGIN,
    authorization_code,
    authorize_url,
    client_credentials,
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
