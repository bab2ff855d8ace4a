"""Command-line administration prints what an operator needs."""

from __future__ import annotations

import io
import re

import pytest
from django.core.management import CommandError, call_command

from memoryhub.models import Agent, User
from tests.oauth.conftest import TEST_ORIGIN, client_credentials

pytestmark = pytest.mark.django_db


def run(*args, **options) -> str:
    out = io.StringIO()
    call_command(*args, stdout=out, **options)
    return out.getvalue()


def test_create_workspace_prints_its_slug_and_id():
    output = run("create_workspace", "Acme", name="Acme Inc.")
    assert re.fullmatch(r"workspace acme \([0-9a-f-]{36}\)\n", output)


def test_add_person_reads_the_password_from_the_environment(monkeypatch):
    run("create_workspace", "acme")
    monkeypatch.setenv("MEMORYHUB_PASSWORD", "a long enough passphrase")
    output = run("add_person", "acme", "dana", roles="engineering,leads", admin=True)
    assert output == "person dana in acme: admin, engineering, leads\n"
    assert User.objects.get(username="dana").check_password("a long enough passphrase")


def test_add_person_refuses_to_guess_a_password(monkeypatch):
    run("create_workspace", "acme")
    monkeypatch.delenv("MEMORYHUB_PASSWORD", raising=False)
    with pytest.raises(CommandError, match="MEMORYHUB_PASSWORD"):
        run("add_person", "acme", "dana")


def test_register_agent_prints_working_credentials_and_where_to_use_them():
    run("create_workspace", "acme")
    output = run("register_agent", "acme", "triage-bot", scopes="memory.read,memory.write", roles="engineering")
    client_id = re.search(r"client_id:\s+(\S+)", output).group(1)
    secret = re.search(r"client_secret:\s+(\S+)", output).group(1)
    assert f"token endpoint: {TEST_ORIGIN}/o/token/" in output
    assert f"resource:       {TEST_ORIGIN}/mcp" in output
    assert "shown once" in output
    body = client_credentials(client_id, secret, resource=f"{TEST_ORIGIN}/mcp")
    assert (body["status"], body["scope"]) == (200, "memory.read memory.write")


def test_register_agent_refuses_memory_audit():
    run("create_workspace", "acme")
    with pytest.raises(CommandError, match="memory.audit"):
        run("register_agent", "acme", "auditor", scopes="memory.audit")


def test_rotate_and_revoke_agent():
    run("create_workspace", "acme")
    first = run("register_agent", "acme", "bot")
    old_secret = re.search(r"client_secret:\s+(\S+)", first).group(1)
    rotated = run("rotate_agent_secret", "acme", "bot")
    client_id = re.search(r"client_id:\s+(\S+)", rotated).group(1)
    new_secret = re.search(r"client_secret:\s+(\S+)", rotated).group(1)
    assert client_credentials(client_id, old_secret)["error"] == "invalid_client"
    assert client_credentials(client_id, new_secret)["status"] == 200
    assert run("revoke_agent", "acme", "bot") == "agent bot in acme revoked\n"
    assert Agent.objects.get(name="bot").revoked_at is not None
    assert client_credentials(client_id, new_secret)["error"] == "invalid_client"
    with pytest.raises(CommandError, match="No agent"):
        run("revoke_agent", "acme", "nobody")
