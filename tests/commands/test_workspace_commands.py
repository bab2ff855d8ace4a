"""The workspace commands a script sets a workspace up with (role, collection,
rule, source, person and the older ones), their --json answers, and their
refusals: exit status 1, the message, and with --json an error object."""

from __future__ import annotations

import io
import json
from pathlib import Path
from typing import Any

import pytest
from django.core.management import CommandError, call_command

from memoryhub.errors import InvalidArgument
from memoryhub.models import AccessRule, Collection, Membership, Role, Source, Tenant
from memoryhub.services import members
from tests.conftest import PASSWORD


def run(*args: str, **options: Any) -> dict:
    out = io.StringIO()
    call_command(*args, json=True, stdout=out, stderr=io.StringIO(), no_color=True, **options)
    return json.loads(out.getvalue())


def refused(*args: str, **options: Any) -> dict:
    """The error object a refused command answers with --json (and raises as its message)."""
    out = io.StringIO()
    with pytest.raises(CommandError) as raised:
        call_command(*args, json=True, stdout=out, stderr=io.StringIO(), **options)
    lines = out.getvalue().splitlines()
    assert len(lines) == 1, lines
    error = json.loads(lines[0])["error"]
    assert error["message"] == str(raised.value)
    return error


def text(*args: str, **options: Any) -> str:
    out = io.StringIO()
    call_command(*args, stdout=out, stderr=io.StringIO(), **options)
    return out.getvalue()


# --------------------------------------------------------------------------- roles


def test_a_role_is_created_assigned_unassigned_and_deleted(people):
    assert run("role", "acme", "oncall", "create", description="Carries the pager") == {
        "name": "oncall", "description": "Carries the pager", "people": 0, "agents": 0, "collections": []}
    assert run("role", "acme", "oncall", "assign", "bruno")["roles"] == ["engineering", "oncall"]
    assert run("role", "acme", "oncall", "assign", "bruno")["roles"] == ["engineering", "oncall"]  # once
    listed = {role["name"]: role for role in run("role", "acme")["roles"]}
    assert listed["oncall"]["people"] == 1
    assert listed["engineering"] == {"name": "engineering", "description": "", "people": 3, "agents": 1,
                                     "collections": ["incidents", "runbooks"]}
    assert run("role", "acme", "oncall", "unassign", "bruno") == {
        "username": "bruno", "active": True, "removed": False, "admin": False, "roles": ["engineering"]}
    run("rule", "acme", "oncall", "runbooks", "grant")
    assert run("role", "acme", "oncall", "delete") == {"name": "oncall", "deleted": True}
    assert not Role.objects.filter(name="oncall").exists()
    assert not AccessRule.objects.filter(role__name="oncall").exists()
    assert "oncall" not in text("role", "acme")


def test_role_refusals(people):
    assert refused("role", "acme", "engineering", "create")["code"] == "conflict"
    assert refused("role", "acme", "nosuch", "delete")["code"] == "not_found"
    assert refused("role", "acme", "nosuch", "assign", "bruno")["field"] == "role"
    # A destructive command names a role exactly as it is stored (any case), nothing near it.
    assert refused("role", "acme", "ENGINEERING!!", "delete")["code"] == "not_found"
    assert Role.objects.filter(tenant=people.acme, name="engineering").exists()
    assert refused("role", "acme", "sales", "assign", "nobody")["code"] == "not_found"
    assert refused("role", "acme", "sales", "assign")["code"] == "error"  # assign names a person
    assert refused("role", "acme", "sales")["code"] == "error"  # and every name an action
    call_command("person", "acme", "cleo", "remove")
    assert refused("role", "acme", "sales", "assign", "cleo")["code"] == "conflict"
    assert not Membership.objects.get(user=people.cleo).roles.exists()


@pytest.mark.parametrize("command", [("role",), ("collection",)])
def test_a_name_is_64_characters_at_most_and_never_cut(people, command):
    longest = "a" * 64
    assert run(*command, "acme", longest, "create")["name"] == longest
    error = refused(*command, "acme", "b" * 65, "create")
    assert (error["code"], error["field"]) == ("invalid_argument", "name")
    assert "65 characters" in error["message"]
    assert refused(*command, "acme", "nul\x00name", "create")["field"] == "name"
    assert refused(*command, "acme", "lone\ud800", "create")["field"] == "name"
    assert refused(*command, "acme", "!!!", "create")["field"] == "name"
    assert not Role.objects.filter(name__startswith="b" * 64).exists()
    assert not Collection.objects.filter(name__startswith="b" * 64).exists()


@pytest.mark.parametrize("command", [("role",), ("collection",)])
def test_a_description_is_200_characters_at_most_and_storable(people, command):
    assert run(*command, "acme", "described", "create", description="d" * 200)["description"] == "d" * 200
    for bad in ("d" * 201, "nul\x00", "lone\ud800"):
        assert refused(*command, "acme", "refused", "create", description=bad)["field"] == "description"
    assert not Role.objects.filter(name="refused").exists() and not Collection.objects.filter(name="refused").exists()


def test_a_workspace_name_is_200_characters_at_most(people):
    assert run("create_workspace", "named", name="n" * 200)["name"] == "n" * 200
    assert refused("create_workspace", "overnamed", name="n" * 201)["field"] == "name"
    assert refused("create_workspace", "nulnamed", name="nul\x00")["field"] == "name"
    assert not Tenant.objects.filter(slug__in=["overnamed", "nulnamed"]).exists()


@pytest.mark.parametrize("email", ["nul\x00@acme.test", "lone\ud800@acme.test", "e" * 245 + "@acme.test",
                                   "e@acme.test\r\nBcc: x@evil.test", '"><script>@x.test', "no-at-sign"])
def test_add_person_refuses_an_email_that_cannot_be_stored(people, monkeypatch, email):
    monkeypatch.setenv("MEMORYHUB_PASSWORD", "a long enough passphrase")
    assert refused("add_person", "acme", "dana", email=email)["field"] == "email"
    assert not Membership.objects.filter(user__username="dana").exists()


def test_add_person_refuses_a_password_that_is_not_text(people, monkeypatch):
    # A byte that is not UTF-8 in the environment reaches Python as a lone surrogate.
    monkeypatch.setenv("MEMORYHUB_PASSWORD", "a passphrase with \udcff in it")
    assert refused("add_person", "acme", "dana")["field"] == "password"
    assert not Membership.objects.filter(user__username="dana").exists()


@pytest.mark.parametrize("password", ["nul\x00 in a passphrase", "lone\ud800 in a passphrase"])
def test_no_password_that_cannot_be_stored_is_set(people, password):
    with pytest.raises(InvalidArgument) as raised:
        members.member_add(caller=people.system(), username="dana", password=password)
    assert raised.value.field == "password"
    with pytest.raises(InvalidArgument):
        members.member_set_password(caller=people.system(), user_id=people.bruno.pk, password=password)
    people.bruno.refresh_from_db()
    assert people.bruno.check_password(PASSWORD)


# --------------------------------------------------------------------------- collections


def test_a_collection_is_created_renamed_retired_and_deleted(people, tmp_path: Path):
    created = run("collection", "acme", "handbook", "create", description="How we work")
    assert created == {"name": "handbook", "description": "How we work", "live": 0, "retired": 0, "roles": []}
    run("rule", "acme", "sales", "handbook", "grant")
    (tmp_path / "docs").mkdir()
    (tmp_path / "docs" / "holidays.md").write_text("# Holidays\n\nThe office closes on the first of May.")
    ingested = run("ingest", "acme", "wiki", str(tmp_path / "docs"), collection="handbook", no_progress=True)
    assert ingested["documents"]["created"] == 1 and ingested["fragments_added"] == 1
    assert ingested["refused"] == []
    listed = {c["name"]: c for c in run("collection", "acme")["collections"]}
    assert listed["handbook"] == {**created, "live": 1, "roles": ["sales"]}
    readers = run("collection", "acme", "handbook", "readers")
    assert {(r["name"], tuple(r["roles"])) for r in readers["readers"]} == {("carol", ("sales",))}

    assert run("collection", "acme", "handbook", "rename", "people-handbook") == {
        "name": "people-handbook", "was": "handbook"}
    assert refused("collection", "acme", "people-handbook", "rename", "runbooks")["code"] == "conflict"
    assert refused("collection", "acme", "people-handbook", "delete")["code"] == "conflict"  # live fragments
    assert refused("collection", "acme", "people-handbook", "retire", confirm="handbook")["field"] == "confirm"
    assert run("collection", "acme", "people-handbook", "retire", confirm="people-handbook")["retired"] == 1
    listed = {c["name"]: c for c in run("collection", "acme")["collections"]}
    assert (listed["people-handbook"]["live"], listed["people-handbook"]["retired"]) == (0, 1)
    assert run("collection", "acme", "people-handbook", "delete") == {"name": "people-handbook", "deleted": True}
    assert "people-handbook" not in {c["name"] for c in run("collection", "acme")["collections"]}
    assert not AccessRule.objects.filter(role__name="sales", collection__name__startswith="people-handbook").exists()


def test_collection_refusals(people):
    assert refused("collection", "acme", "runbooks", "create")["code"] == "conflict"
    error = refused("collection", "acme", "nosuch", "delete")
    assert (error["code"], error["field"]) == ("not_found", "collection")
    assert "'nosuch'" in error["message"]
    assert refused("collection", "acme", "runbooks", "rename")["code"] == "error"  # the new name is missing
    assert refused("collection", "acme", "runbooks", "rename", "c" * 65)["field"] == "name"
    assert run("collection", "acme", "accounts", "rename", "c" * 64)["name"] == "c" * 64
    assert refused("collection", "acme", "nul\x00", "readers")["code"] == "invalid_argument"
    assert Collection.objects.filter(tenant=people.acme, name="runbooks").exists()


# --------------------------------------------------------------------------- access rules


def test_the_grid_and_granting_and_revoking_a_rule(people):
    grid = run("rule", "acme")
    assert grid == {"collections": ["accounts", "incidents", "runbooks"], "roles": [
        {"role": "engineering", "reads": ["incidents", "runbooks"]},
        {"role": "leads", "reads": ["accounts", "incidents"]},
        {"role": "sales", "reads": ["accounts"]},
    ]}
    lines = text("rule", "acme").splitlines()
    assert lines[0].split() == ["accounts", "incidents", "runbooks"]
    assert lines[3].split() == ["sales", "x", "-", "-"]
    assert run("rule", "acme", "sales", "runbooks", "grant") == {"role": "sales", "collection": "runbooks",
                                                                 "reads": True}
    assert run("person", "acme", "carol")["reads"] == ["accounts", "runbooks"]
    assert refused("rule", "acme", "sales", "runbooks", "grant")["code"] == "conflict"
    assert run("rule", "acme", "sales", "runbooks", "revoke")["reads"] is False
    assert run("person", "acme", "carol")["reads"] == ["accounts"]
    assert refused("rule", "acme", "sales", "runbooks", "revoke")["code"] == "not_found"
    assert refused("rule", "acme", "nosuch", "runbooks", "grant")["field"] == "role"
    assert refused("rule", "acme", "sales", "nosuch", "grant")["field"] == "collection"
    assert refused("rule", "acme", "sales")["code"] == "error"


# --------------------------------------------------------------------------- sources


def test_a_source_is_created_with_its_secret_once_and_listed(people):
    created = run("source", "acme", "crm", "create", collection="accounts", kind="tickets")
    assert created["client_id"] and len(created["client_secret"]) > 30
    assert created["token_endpoint"].endswith("/o/token/")
    assert created["ingest_endpoint"].endswith("/api/ingest/documents")
    assert (created["source"], created["kind"], created["collection"], created["state"]) == (
        "crm", "tickets", "accounts", "active")
    status = run("source", "acme", "crm")
    assert "client_secret" not in status and status["documents"] == 0
    assert {s["source"] for s in run("source", "acme")["sources"]} == {"wiki", "tickets", "crm"}
    assert "shown once" in text("source", "acme", "crm2", "create")


def test_source_refusals(people):
    assert refused("source", "acme", "wiki", "create")["code"] == "conflict"
    assert refused("source", "acme", "triage-bot", "create")["code"] == "conflict"  # agents share the names
    assert refused("source", "acme", "crm", "create", collection="nosuch")["field"] == "collection"
    assert refused("source", "acme", "c" * 65, "create")["field"] == "name"
    assert run("source", "acme", "c" * 64, "create")["source"] == "c" * 64
    assert refused("source", "acme", "crm", "create", kind="k" * 65)["field"] == "kind"
    assert run("source", "acme", "crm", "create", kind="k" * 64)["kind"] == "k" * 64
    assert refused("source", "acme", "nosuch", "status")["code"] == "not_found"
    assert refused("source", "acme", "wiki", "status", collection="runbooks")["code"] == "error"
    names = sorted(Source.objects.filter(tenant=people.acme).values_list("agent__name", flat=True))
    assert names == ["c" * 64, "crm", "tickets", "wiki"]  # nothing made of the refused ones


# --------------------------------------------------------------------------- people


def test_people_are_listed_shown_and_made_admins(people):
    assert [p["username"] for p in run("person", "acme")["people"]] == ["ada", "bruno", "carol", "cleo"]
    assert run("person", "acme", "bruno") == {"username": "bruno", "active": True, "removed": False,
                                              "admin": False, "roles": ["engineering"],
                                              "reads": ["incidents", "runbooks"]}
    assert run("person", "acme", "bruno", "grant-admin")["admin"] is True
    assert run("person", "acme", "bruno", "revoke-admin")["admin"] is False
    error = refused("person", "acme", "ada", "revoke-admin")  # the last admin stays
    assert error["code"] == "conflict"
    assert Membership.objects.get(user=people.ada).is_admin
    assert refused("person", "acme", "nobody")["code"] == "not_found"
    assert refused("person", "acme", "nul\x00")["field"] == "username"


def test_add_person_create_workspace_and_agents_answer_in_json(people, monkeypatch):
    monkeypatch.setenv("MEMORYHUB_PASSWORD", "a long enough passphrase")
    assert run("add_person", "acme", "dana", roles="leads", admin=True) == {
        "username": "dana", "active": True, "removed": False, "admin": True, "roles": ["leads"]}
    workspace = run("create_workspace", "initrode", name="Initrode")
    assert (workspace["workspace"], workspace["name"]) == ("initrode", "Initrode")
    assert run("create_workspace", "initrode")["id"] == workspace["id"]  # idempotent
    assert run("create_workspace", "w" * 64)["workspace"] == "w" * 64
    assert refused("create_workspace", "w" * 65)["field"] == "slug"
    assert refused("create_workspace", "nul\x00")["field"] == "slug"
    assert list(Tenant.objects.filter(slug__startswith="w" * 64).values_list("slug", flat=True)) == ["w" * 64]

    agent = run("register_agent", "acme", "scribe", scopes="memory.read", roles="sales")
    assert (agent["name"], agent["scopes"], agent["roles"]) == ("scribe", ["memory.read"], ["sales"])
    assert agent["client_secret"] and agent["resource"].endswith("/mcp")
    rotated = run("rotate_agent_secret", "acme", "scribe")
    assert rotated["client_id"] == agent["client_id"] and rotated["client_secret"] != agent["client_secret"]
    assert run("revoke_agent", "acme", "scribe") == {"name": "scribe", "revoked": True}
    assert refused("register_agent", "acme", "triage-bot")["code"] == "conflict"
    assert refused("register_agent", "acme", "bot", scopes="memory.audit")["field"] == "scopes"
    assert refused("revoke_agent", "acme", "nosuch")["code"] == "not_found"


@pytest.mark.parametrize("args", [
    ("role", "nowhere"), ("role", "nowhere", "x", "create"), ("collection", "nowhere"), ("rule", "nowhere"),
    ("source", "nowhere"), ("person", "nowhere"), ("add_person", "nowhere", "x"), ("register_agent", "nowhere", "x"),
    ("revoke_agent", "nowhere", "x"), ("rotate_agent_secret", "nowhere", "x"), ("ingest", "nowhere", "x", "."),
    ("role", "nul\x00"),
])
def test_an_unknown_workspace_is_refused_by_every_command(people, args, monkeypatch):
    monkeypatch.setenv("MEMORYHUB_PASSWORD", "a long enough passphrase")
    error = refused(*args)
    assert error["field"] == "workspace"
    assert error["code"] in ("not_found", "invalid_argument")


def test_a_member_acting_as_admin_is_refused_and_nothing_changes(people):
    error = refused("role", "acme", "oncall", "create", acting_as="bruno")
    assert error["code"] == "permission_denied"
    assert refused("rule", "acme", "sales", "runbooks", "grant", acting_as="nul\x00")["field"] == "as"
    assert not Role.objects.filter(name="oncall").exists()
    assert run("role", "acme", "oncall", "create", acting_as="ada")["name"] == "oncall"


def test_without_json_a_refusal_is_only_the_message(people):
    out = io.StringIO()
    with pytest.raises(CommandError, match="already exists"):
        call_command("role", "acme", "sales", "create", stdout=out)
    assert out.getvalue() == ""


def test_a_name_that_would_lose_characters_is_refused_with_its_escaped_echo(people):
    error = refused("create_workspace", "\x1b[31mred\x1b[0m")
    assert error["field"] == "slug" and "\x1b" not in error["message"] and "\\x1b" in error["message"]
    assert "'31mred0m'" in error["message"]  # the form it could take, for the admin to choose
    assert refused("register_agent", "acme", "<b>scribe</b>", scopes="memory.read")["field"] == "name"
    scope = refused("register_agent", "acme", "scribe", scopes="memory.read,\x1b[2Jmemory.x")
    assert scope["field"] == "scopes" and "\x1b" not in scope["message"] and "'\\x1b[2Jmemory.x'" in scope["message"]
    assert not Tenant.objects.filter(slug="31mred0m").exists()
    from memoryhub.models import Agent
    assert not Agent.objects.filter(name__in=["bscribeb", "scribe"]).exists()


def test_add_person_refuses_a_login_name_that_passes_for_another(people, monkeypatch):
    monkeypatch.setenv("MEMORYHUB_PASSWORD", "a long enough passphrase")
    error = refused("add_person", "acme", "\u0430da")
    assert error["field"] == "username" and "\\u0430da" in error["message"]
    from memoryhub.models import User
    assert not User.objects.filter(username="\u0430da").exists()
    taken = refused("add_person", "acme", "\u0430\u0501\u0430")  # all Cyrillic, and reads as "ada"
    assert taken["code"] == "conflict" and taken["field"] == "username" and "reads as 'ada'" in taken["message"]
    assert run("add_person", "acme", "\u0430\u0441\u0435")["username"] == "\u0430\u0441\u0435"  # nobody reads "ace"
