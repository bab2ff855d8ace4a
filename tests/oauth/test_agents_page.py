"""The workspace admins' agents page."""

from __future__ import annotations

import re

from django.test import Client
from oauth2_provider.models import Application

from memoryhub.models import Agent
from tests.conftest import signed_in
from tests.oauth.conftest import client_credentials


def _credentials(response) -> tuple[str, str]:
    text = response.content.decode()
    client_id = re.search(r'id="client-id">([^<]+)<', text).group(1)
    secret = re.search(r'id="client-secret">([^<]+)<', text).group(1)
    return client_id, secret


def test_an_admin_sees_the_page(people):
    page = signed_in(people.ada).get("/workspace/agents/")
    assert page.status_code == 200
    text = page.content.decode()
    assert "triage-bot" in text and "Register an agent" in text
    assert "memory.audit" not in text


def test_members_and_people_outside_a_workspace_are_refused(people):
    assert signed_in(people.bruno).get("/workspace/agents/").status_code == 403
    assert signed_in(people.nomad).get("/workspace/agents/").status_code == 403
    assert Client().get("/workspace/agents/").status_code == 302


def test_registering_shows_the_secret_once(people):
    response = signed_in(people.ada).post("/workspace/agents/add/", {
        "name": "summariser", "display_name": "Summariser", "scopes": ["memory.read"], "roles": ["engineering"],
    })
    assert response.status_code == 200
    assert "no-store" in response["Cache-Control"]
    client_id, secret = _credentials(response)
    agent = Agent.objects.get(name="summariser")
    assert agent.tenant == people.ada.tenant
    assert agent.created_by == people.ada
    assert [role.name for role in agent.roles.all()] == ["engineering"]
    # Only a hash is kept.
    assert secret not in Application.objects.get(client_id=client_id).client_secret
    assert secret not in signed_in(people.ada).get("/workspace/agents/").content.decode()
    body = client_credentials(client_id, secret)
    assert (body["status"], body["scope"], body["expires_in"]) == (200, "memory.read", 3600)


def test_an_agent_cannot_be_granted_memory_audit(people):
    response = signed_in(people.ada).post("/workspace/agents/add/", {"name": "auditor", "scopes": ["memory.audit"]})
    assert response.status_code == 400
    assert not Agent.objects.filter(name="auditor").exists()


def test_a_taken_name_is_refused(people):
    response = signed_in(people.ada).post("/workspace/agents/add/", {"name": "triage-bot", "scopes": ["memory.read"]})
    assert response.status_code == 400
    assert b"already exists" in response.content


def test_rotating_shows_a_new_secret_and_ends_the_old_one(people):
    bot = people.triage_bot
    response = signed_in(people.ada).post("/workspace/agents/triage-bot/rotate/")
    assert response.status_code == 200
    client_id, secret = _credentials(response)
    assert client_id == bot.client_id
    assert client_credentials(client_id, bot.client_secret)["error"] == "invalid_client"
    assert client_credentials(client_id, secret)["status"] == 200


def test_revoking_ends_the_agent(people):
    bot = people.triage_bot
    admin = signed_in(people.ada)
    for typed in ({}, {"confirm": "triage"}, {"confirm": "TRIAGE-BOT"}):
        refused = admin.post("/workspace/agents/triage-bot/revoke/", typed, follow=True)
        assert b"Type triage-bot exactly" in refused.content, typed
        assert Agent.objects.get(name="triage-bot").revoked_at is None
    response = admin.post("/workspace/agents/triage-bot/revoke/", {"confirm": "triage-bot"}, follow=True)
    assert b"is revoked" in response.content
    assert Agent.objects.get(name="triage-bot").revoked_at is not None
    assert client_credentials(bot.client_id, bot.client_secret)["error"] == "invalid_client"


def test_another_workspaces_admin_cannot_touch_the_agent(people):
    bot = people.triage_bot
    olga = signed_in(people.olga)
    assert olga.post("/workspace/agents/triage-bot/rotate/").status_code == 404
    assert olga.post("/workspace/agents/triage-bot/revoke/").status_code == 404
    assert "triage-bot" not in olga.get("/workspace/agents/").content.decode()
    assert client_credentials(bot.client_id, bot.client_secret)["status"] == 200


def test_a_member_cannot_register_rotate_or_revoke(people):
    bruno = signed_in(people.bruno)
    assert bruno.post("/workspace/agents/add/", {"name": "x", "scopes": ["memory.read"]}).status_code == 403
    assert bruno.post("/workspace/agents/triage-bot/rotate/").status_code == 403
    assert bruno.post("/workspace/agents/triage-bot/revoke/").status_code == 403
