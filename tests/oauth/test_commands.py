"""Command-line administration prints what an operator needs, and acts as a
named admin (`--as USERNAME`) or as the workspace's system caller."""

from __future__ import annotations

import io
import re

import pytest
from django.core.management import CommandError, call_command

from memoryhub.models import Agent, Role, User
from tests.conftest import PASSWORD
from tests.oauth.conftest import TEST_ORIGIN, client_credentials

pytestmark = pytest.mark.django_db


def run(*args, **options) -> str:
    out = io.StringIO()
    call_command(*args, stdout=out, **options)
    return out.getvalue()


def test_create_workspace_prints_its_slug_and_id():
    output = run("create_workspace", "Acme", name="Acme Inc.")
    assert re.fullmatch(r"workspace acme \([0-9a-f-]{36}\)\n", output)


def test_add_person_reads_the_password_from_the_environment_and_creates_missing_roles(monkeypatch):
    run("create_workspace", "acme")
    assert not Role.objects.filter(tenant__slug="acme").exists()
    monkeypatch.setenv("MEMORYHUB_PASSWORD", "a long enough passphrase")
    output = run("add_person", "acme", "dana", roles="engineering,leads", admin=True)
    assert output == "person dana in acme: admin, engineering, leads\n"
    assert User.objects.get(username="dana").check_password("a long enough passphrase")
    assert sorted(Role.objects.filter(tenant__slug="acme").values_list("name", flat=True)) == ["engineering", "leads"]


def test_add_person_refuses_to_guess_a_password(monkeypatch):
    run("create_workspace", "acme")
    monkeypatch.delenv("MEMORYHUB_PASSWORD", raising=False)
    with pytest.raises(CommandError, match="MEMORYHUB_PASSWORD"):
        run("add_person", "acme", "dana")


def test_add_person_takes_a_name_another_workspace_uses(people, monkeypatch):
    monkeypatch.setenv("MEMORYHUB_PASSWORD", "another long passphrase")
    assert run("add_person", "acme", "olga", roles="sales") == "person olga in acme: member, sales\n"
    acme_olga = User.objects.get(tenant=people.acme, username="olga")
    assert acme_olga.pk != people.olga.pk
    assert people.olga.tenant == people.globex


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
    agent = Agent.objects.get(name="triage-bot")
    # No --as: the system caller registered it (created the missing role, and nobody is its creator).
    assert [role.name for role in agent.roles.all()] == ["engineering"]
    assert agent.created_by is None


def test_register_agent_refuses_memory_audit():
    run("create_workspace", "acme")
    with pytest.raises(CommandError, match="memory.audit"):
        run("register_agent", "acme", "auditor", scopes="memory.audit")
    assert not Agent.objects.filter(name="auditor").exists()


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
    with pytest.raises(CommandError, match="No such agent in this workspace"):
        run("revoke_agent", "acme", "nobody")


def test_a_command_acts_as_the_admin_it_names(people):
    output = run("register_agent", "acme", "summariser", scopes="memory.read", roles="engineering", acting_as="ada")
    assert "agent summariser in acme" in output
    assert Agent.objects.get(tenant=people.acme, name="summariser").created_by == people.ada
    rotated = run("rotate_agent_secret", "acme", "summariser", acting_as="ada")
    assert "client_secret:" in rotated
    assert run("revoke_agent", "acme", "summariser", acting_as="ada") == "agent summariser in acme revoked\n"


def test_a_command_refuses_to_act_as_a_member_or_someone_of_another_workspace(people, monkeypatch):
    monkeypatch.setenv("MEMORYHUB_PASSWORD", PASSWORD)
    for acting_as, message in (("bruno", "Only a workspace admin can do this."),
                               ("olga", "No person named 'olga' in this workspace."),
                               ("nobody", "No person named 'nobody' in this workspace.")):
        with pytest.raises(CommandError, match=re.escape(message)):
            run("register_agent", "acme", "sneaky", scopes="memory.read", acting_as=acting_as)
        with pytest.raises(CommandError, match=re.escape(message)):
            run("add_person", "acme", "mallory", roles="leads", admin=True, acting_as=acting_as)
        with pytest.raises(CommandError, match=re.escape(message)):
            run("revoke_agent", "acme", "triage-bot", acting_as=acting_as)
    assert not Agent.objects.filter(name="sneaky").exists()
    assert not User.objects.filter(username="mallory").exists()
    assert Agent.objects.get(tenant=people.acme, name="triage-bot").revoked_at is None


def test_a_command_in_an_unknown_workspace_is_a_clear_error():
    with pytest.raises(CommandError, match="No workspace named 'nowhere'"):
        run("register_agent", "nowhere", "bot")
