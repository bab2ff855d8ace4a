"""The token endpoint: people's codes and refresh chains, agents' client credentials."""

from __future__ import annotations

from datetime import timedelta

import pytest
from django.test import Client
from django.utils import timezone
from oauth2_provider.models import AccessToken, RefreshToken

from memoryhub.oauth.tokens import token_checksum
from memoryhub.services.agents import agent_register, agent_revoke, agent_rotate_secret
from tests.oauth.conftest import (
    TEST_ORIGIN,
    authorization_code,
    client_credentials,
    exchange_code,
    refresh,
    stored_token,
)


def _seconds_left(token: AccessToken) -> float:
    return (token.expires - timezone.now()).total_seconds()


def test_a_persons_token_lives_15_minutes_and_is_bound_to_the_resource(people, mcp_client):
    code, verifier = authorization_code(people.bruno, mcp_client)
    body = exchange_code(mcp_client, code, verifier)
    assert body["status"] == 200, body
    assert body["expires_in"] == 900
    assert body["refresh_token"]
    assert body["scope"] == "memory.read memory.write"
    token = stored_token(body["access_token"])
    assert 890 < _seconds_left(token) <= 900
    assert token.resource == [f"{TEST_ORIGIN}/mcp"]
    assert token.user == people.bruno
    # Stored hashed: the token itself is not in the database.
    assert token.token == ""


def test_a_request_without_resource_is_bound_to_the_full_endpoint(people, mcp_client):
    code, verifier = authorization_code(people.bruno, mcp_client, resource=None)
    body = exchange_code(mcp_client, code, verifier)
    assert stored_token(body["access_token"]).resource == [f"{TEST_ORIGIN}/mcp"]


def test_a_readonly_authorisation_gives_a_readonly_token(people, mcp_client):
    code, verifier = authorization_code(people.bruno, mcp_client, resource=f"{TEST_ORIGIN}/mcp/readonly")
    body = exchange_code(mcp_client, code, verifier)
    assert stored_token(body["access_token"]).resource == [f"{TEST_ORIGIN}/mcp/readonly"]


def test_the_token_request_cannot_widen_the_resource(people, mcp_client):
    code, verifier = authorization_code(people.bruno, mcp_client, resource=f"{TEST_ORIGIN}/mcp/readonly")
    body = exchange_code(mcp_client, code, verifier, resource=f"{TEST_ORIGIN}/mcp")
    assert (body["status"], body["error"]) == (400, "invalid_target")


def test_the_token_request_cannot_name_another_resource(people, mcp_client):
    code, verifier = authorization_code(people.bruno, mcp_client)
    body = exchange_code(mcp_client, code, verifier, resource="https://elsewhere.example/mcp")
    assert (body["status"], body["error"]) == (400, "invalid_target")


def test_a_code_needs_its_verifier(people, mcp_client):
    code, _ = authorization_code(people.bruno, mcp_client)
    body = exchange_code(mcp_client, code, None)
    assert (body["status"], body["error"]) == (400, "invalid_request")


def test_a_code_with_the_wrong_verifier_is_refused(people, mcp_client):
    code, _ = authorization_code(people.bruno, mcp_client)
    body = exchange_code(mcp_client, code, "x" * 64)
    assert (body["status"], body["error"]) == (400, "invalid_grant")


def test_a_code_works_once(people, mcp_client):
    code, verifier = authorization_code(people.bruno, mcp_client)
    assert exchange_code(mcp_client, code, verifier)["status"] == 200
    assert exchange_code(mcp_client, code, verifier)["error"] == "invalid_grant"


def test_refresh_rotates_and_keeps_the_audience(people, mcp_client):
    code, verifier = authorization_code(people.bruno, mcp_client, resource=f"{TEST_ORIGIN}/mcp/readonly")
    first = exchange_code(mcp_client, code, verifier)
    second = refresh(mcp_client, first["refresh_token"])
    assert second["status"] == 200, second
    assert second["refresh_token"] != first["refresh_token"]
    assert second["expires_in"] == 900
    assert stored_token(second["access_token"]).resource == [f"{TEST_ORIGIN}/mcp/readonly"]


def test_a_refresh_asking_a_scope_many_times_gets_it_once(people, mcp_client):
    code, verifier = authorization_code(people.bruno, mcp_client)
    first = exchange_code(mcp_client, code, verifier)
    second = refresh(mcp_client, first["refresh_token"], scope=" ".join(["memory.read"] * 500))
    assert (second["status"], second["scope"]) == (200, "memory.read"), second
    assert stored_token(second["access_token"]).scope == "memory.read"


def test_reusing_an_old_refresh_token_revokes_the_whole_family(people, mcp_client):
    code, verifier = authorization_code(people.bruno, mcp_client)
    first = exchange_code(mcp_client, code, verifier)
    second = refresh(mcp_client, first["refresh_token"])
    replay = refresh(mcp_client, first["refresh_token"])
    assert (replay["status"], replay["error"]) == (400, "invalid_grant")
    # The legitimate holder's newer tokens died with the family.
    assert refresh(mcp_client, second["refresh_token"])["error"] == "invalid_grant"
    assert not AccessToken.objects.filter(user=people.bruno).exists()


def test_a_deactivated_person_cannot_refresh(people, mcp_client):
    code, verifier = authorization_code(people.bruno, mcp_client)
    first = exchange_code(mcp_client, code, verifier)
    people.bruno.is_active = False
    people.bruno.save()
    assert refresh(mcp_client, first["refresh_token"])["error"] == "invalid_grant"


def test_an_idle_refresh_chain_expires_after_30_days(people, mcp_client):
    code, verifier = authorization_code(people.bruno, mcp_client)
    first = exchange_code(mcp_client, code, verifier)
    AccessToken.objects.filter(user=people.bruno).update(expires=timezone.now() - timedelta(days=30, seconds=1))
    assert refresh(mcp_client, first["refresh_token"])["error"] == "invalid_grant"


def test_an_agent_token_lives_60_minutes_without_refresh(people):
    bot = people.triage_bot
    body = client_credentials(bot.client_id, bot.client_secret, resource=f"{TEST_ORIGIN}/mcp")
    assert body["status"] == 200, body
    assert body["expires_in"] == 3600
    assert "refresh_token" not in body
    assert body["scope"] == "memory.read memory.write"
    token = stored_token(body["access_token"])
    assert 3590 < _seconds_left(token) <= 3600
    assert token.user is None
    assert token.resource == [f"{TEST_ORIGIN}/mcp"]
    assert not RefreshToken.objects.exists()


def test_an_agent_may_narrow_its_scopes(people):
    bot = people.triage_bot
    body = client_credentials(bot.client_id, bot.client_secret, scope="memory.read")
    assert body["scope"] == "memory.read"


def test_a_scope_asked_many_times_is_granted_and_stored_once(people):
    bot = people.triage_bot
    body = client_credentials(bot.client_id, bot.client_secret, scope=" ".join(["memory.read"] * 5000))
    assert (body["status"], body["scope"]) == (200, "memory.read")
    assert stored_token(body["access_token"]).scope == "memory.read"


def test_an_agent_cannot_ask_beyond_its_grant(people):
    reader = agent_register(caller=people.caller(people.ada), name="reader", scopes=["memory.read"])
    for scope in ("memory.write", "memory.audit", "memory.write memory.audit", "memory.read ingest",
                  "registration", "unknown"):
        body = client_credentials(reader.client_id, reader.client_secret, scope=scope)
        assert (body["status"], body["error"]) == (400, "invalid_scope"), scope


def test_an_agent_asking_for_every_memory_scope_gets_its_grant(people):
    # What MCP clients do: ask for what the resource's challenge lists.
    reader = agent_register(caller=people.caller(people.ada), name="reader", scopes=["memory.read"])
    body = client_credentials(reader.client_id, reader.client_secret, scope="memory.read memory.write memory.audit")
    assert (body["status"], body["scope"]) == (200, "memory.read")
    assert stored_token(body["access_token"]).scope == "memory.read"


def test_an_agent_never_gets_memory_audit(people):
    bot = people.triage_bot
    bot.agent.scopes = "memory.audit memory.read"  # even if the row says so
    bot.agent.save()
    body = client_credentials(bot.client_id, bot.client_secret, scope="memory.audit")
    assert body["error"] == "invalid_scope"
    assert client_credentials(bot.client_id, bot.client_secret)["scope"] == "memory.read"


def test_an_agent_token_for_another_resource_is_refused(people):
    bot = people.triage_bot
    body = client_credentials(bot.client_id, bot.client_secret, resource="https://elsewhere.example/")
    assert (body["status"], body["error"]) == (400, "invalid_target")


def test_a_wrong_secret_is_refused(people):
    bot = people.triage_bot
    body = client_credentials(bot.client_id, "not-the-secret")
    assert (body["status"], body["error"]) == (401, "invalid_client")


def test_a_revoked_agent_gets_nothing_and_loses_its_tokens(people):
    bot = people.triage_bot
    issued = client_credentials(bot.client_id, bot.client_secret)
    agent_revoke(caller=people.caller(people.ada), name="triage-bot")
    assert client_credentials(bot.client_id, bot.client_secret)["error"] == "invalid_client"
    assert not AccessToken.objects.filter(token_checksum=token_checksum(issued["access_token"])).exists()


def test_rotating_a_secret_ends_the_old_secret_and_its_tokens(people):
    bot = people.triage_bot
    issued = client_credentials(bot.client_id, bot.client_secret)
    rotated = agent_rotate_secret(caller=people.caller(people.ada), name="triage-bot")
    assert client_credentials(bot.client_id, bot.client_secret)["error"] == "invalid_client"
    assert not AccessToken.objects.filter(token_checksum=token_checksum(issued["access_token"])).exists()
    assert client_credentials(rotated.client_id, rotated.client_secret)["status"] == 200


def test_a_source_gets_an_ingest_token_with_no_mcp_audience(people):
    source = people.wiki_credentials
    body = client_credentials(source.client_id, source.client_secret)
    assert body["status"] == 200, body
    assert body["scope"] == "ingest"
    assert stored_token(body["access_token"]).resource == []
    assert client_credentials(source.client_id, source.client_secret, scope="memory.read")["error"] == "invalid_scope"
    assert client_credentials(source.client_id, source.client_secret,
                              resource=f"{TEST_ORIGIN}/mcp")["error"] == "invalid_target"


def test_the_password_grant_is_off(people, mcp_client):
    response = Client().post("/o/token/", {"grant_type": "password", "username": "bruno",
                                           "password": "x", "client_id": mcp_client.client_id})
    assert response.status_code == 400
    assert response.json()["error"] == "unsupported_grant_type"


@pytest.mark.parametrize("fields", [{}, {"device_code": "x"}, {"device_code": "x", "client_id": "mcp"}])
def test_the_device_grant_is_off(people, mcp_client, fields):
    # DOT answers this grant itself; without device_code that was a 500.
    response = Client(raise_request_exception=False).post(
        "/o/token/", {"grant_type": "urn:ietf:params:oauth:grant-type:device_code", **fields})
    assert response.status_code == 400, response.content
    assert response.json()["error"] == "unsupported_grant_type"
