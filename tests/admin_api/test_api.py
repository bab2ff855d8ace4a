"""The REST admin API over HTTP: every operation as a workspace's admin, the
change visible through the services; every route refused to the wrong caller
with nothing changed."""

from __future__ import annotations

import datetime as dt

import httpx2
import pytest
from django.urls import URLPattern, resolve
from django.utils import timezone

from memoryhub.access import ADMIN_SCOPE
from memoryhub.api.urls import admin_urls
from memoryhub.models import AccessRule, Fragment, Role
from memoryhub.oauth.policy import admin_api_url
from memoryhub.services import access_rules, agents, collections, connected_apps, members, roles, sources
from tests.admin_api.conftest import AdminAPI, admin_api_for, authorised, person_client, state
from tests.ingest.conftest import client_credentials_token
from tests.support.tokens import make_token, person_mcp_token


def _fragment(people, collection: str, value: str = "The runbook lives in the wiki.") -> Fragment:
    now = timezone.now() - dt.timedelta(minutes=1)
    return Fragment.objects.create(tenant=people.acme, collection=people.collection(collection), value=value,
                                   created_at=now, recorded_at=now, content_hash=value)


# ---------------------------------------------------------------- the admin's operations


def test_members_are_listed_given_roles_made_admin_deactivated_reactivated_and_removed(ada_api, live_people):
    listed = ada_api.call("GET", "/members")
    assert listed.status_code == 200, listed.text
    ada = next(m for m in listed.json() if m["username"] == "ada")
    assert ada == {"user_id": live_people.ada.pk, "username": "ada", "email": "ada@test.invalid", "is_admin": True,
                   "active": True, "removed": False, "roles": ["engineering", "leads"]}
    assert [m["username"] for m in listed.json()] == ["ada", "bruno", "carol", "cleo"]

    cleo = live_people.cleo.pk
    updated = ada_api.call("PATCH", f"/members/{cleo}", {"roles": ["sales", "leads"]})
    assert updated.status_code == 200, updated.text
    assert updated.json()["roles"] == ["leads", "sales"] and updated.json()["is_admin"] is False
    as_ada = live_people.caller(live_people.ada)
    assert {r.name for r in members.member_get(caller=as_ada, user_id=cleo).roles.all()} == {"leads", "sales"}

    promoted = ada_api.call("PATCH", f"/members/{cleo}", {"is_admin": True})
    assert promoted.json()["is_admin"] is True and promoted.json()["roles"] == ["leads", "sales"]
    assert members.member_get(caller=as_ada, user_id=cleo).is_admin
    assert ada_api.call("PATCH", f"/members/{cleo}", {"is_admin": False}).json()["is_admin"] is False

    deactivated = ada_api.call("POST", f"/members/{cleo}/deactivate")
    assert deactivated.status_code == 200 and deactivated.json()["active"] is False
    assert not members.member_get(caller=as_ada, user_id=cleo).user.is_active
    reactivated = ada_api.call("POST", f"/members/{cleo}/reactivate")
    assert reactivated.status_code == 200 and reactivated.json()["active"] is True
    assert members.member_get(caller=as_ada, user_id=cleo).user.is_active

    removed = ada_api.call("POST", f"/members/{cleo}/remove")
    assert removed.status_code == 200
    assert (removed.json()["removed"], removed.json()["active"], removed.json()["roles"]) == (True, False, [])
    assert members.member_get(caller=as_ada, user_id=cleo).removed_at is not None

    # The domain's own rules answer through the API: the last admin cannot leave.
    refused = ada_api.call("POST", f"/members/{live_people.ada.pk}/deactivate")
    assert refused.status_code == 409 and refused.json()["error"]["field"] == "user"


def test_roles_are_listed_created_and_deleted(ada_api, live_people):
    assert [r["name"] for r in ada_api.call("GET", "/roles").json()] == ["engineering", "leads", "sales"]
    created = ada_api.call("POST", "/roles", {"name": "support", "description": "Front line"})
    assert created.status_code == 201, created.text
    assert created.json()["name"] == "support" and created.json()["description"] == "Front line"
    as_ada = live_people.caller(live_people.ada)
    assert "support" in {r.name for r in roles.roles_list(caller=as_ada)}
    assert ada_api.call("POST", "/roles", {"name": "support"}).status_code == 409

    deleted = ada_api.call("DELETE", f"/roles/{created.json()['id']}")
    assert deleted.status_code == 200 and deleted.json() == {"deleted": "support"}
    assert "support" not in {r.name for r in roles.roles_list(caller=as_ada)}
    assert ada_api.call("DELETE", f"/roles/{created.json()['id']}").status_code == 404


def test_collections_are_listed_with_counts_created_renamed_retired_and_deleted(ada_api, live_people):
    _fragment(live_people, "accounts")
    _fragment(live_people, "accounts", "Renewals are in March.")
    listed = ada_api.call("GET", "/collections")
    assert listed.status_code == 200
    accounts = next(c for c in listed.json() if c["name"] == "accounts")
    assert (accounts["live"], accounts["retired"], accounts["readable_by"]) == (2, 0, ["leads", "sales"])

    created = ada_api.call("POST", "/collections", {"name": "Design Notes", "description": "UX"})
    assert created.status_code == 201, created.text
    assert created.json()["name"] == "design-notes"
    as_ada = live_people.caller(live_people.ada)
    renamed = ada_api.call("PATCH", f"/collections/{created.json()['id']}", {"name": "design"})
    assert renamed.status_code == 200 and renamed.json()["name"] == "design"
    assert collections.collection_get(caller=as_ada, collection_id=created.json()["id"]).name == "design"

    accounts_id = accounts["id"]
    wrong = ada_api.call("POST", f"/collections/{accounts_id}/retire", {"confirm": "Accounts"})
    assert wrong.status_code == 400 and wrong.json()["error"]["field"] == "confirm"
    assert ada_api.call("DELETE", f"/collections/{accounts_id}").status_code == 409  # still live
    retired = ada_api.call("POST", f"/collections/{accounts_id}/retire", {"confirm": "accounts"})
    assert retired.status_code == 200 and retired.json() == {"retired": 2}
    assert Fragment.objects.filter(collection_id=accounts_id, retired_at__isnull=True).count() == 0

    deleted = ada_api.call("DELETE", f"/collections/{accounts_id}")
    assert deleted.status_code == 200 and deleted.json() == {"deleted": "accounts"}
    assert "accounts" not in collections.collection_names(caller=as_ada)
    assert ada_api.call("DELETE", f"/collections/{accounts_id}").status_code == 404


def test_access_rules_are_a_grid_granted_and_revoked(ada_api, live_people):
    grid = ada_api.call("GET", "/access-rules")
    assert grid.status_code == 200
    assert grid.json()["collections"] == ["accounts", "incidents", "runbooks"]
    sales = next(row for row in grid.json()["rows"] if row["role"] == "sales")
    assert [cell["rule_id"] is not None for cell in sales["cells"]] == [True, False, False]

    granted = ada_api.call("POST", "/access-rules", {"role": "sales", "collection": "runbooks"})
    assert granted.status_code == 201, granted.text
    assert granted.json()["role"] == "sales" and granted.json()["collection"] == "runbooks"
    as_ada = live_people.caller(live_people.ada)
    assert ("sales", "runbooks") in {(r.role.name, r.collection.name)
                                     for r in access_rules.access_rules_list(caller=as_ada)}
    assert "runbooks" in {c.name for c in collections.member_readable_collections(
        caller=as_ada, user_id=live_people.carol.pk)}
    assert ada_api.call("POST", "/access-rules", {"role": "sales", "collection": "runbooks"}).status_code == 409
    assert ada_api.call("POST", "/access-rules", {"role": "sales", "collection": "nowhere"}).status_code == 404

    revoked = ada_api.call("DELETE", f"/access-rules/{granted.json()['id']}")
    assert revoked.status_code == 200 and revoked.json()["collection"] == "runbooks"
    assert not AccessRule.objects.filter(pk=granted.json()["id"]).exists()
    assert "runbooks" not in {c.name for c in collections.member_readable_collections(
        caller=as_ada, user_id=live_people.carol.pk)}


def test_sources_are_listed_with_health_created_disabled_enabled_rotated_and_revoked(ada_api, live_people):
    listed = ada_api.call("GET", "/sources")
    assert listed.status_code == 200
    wiki = next(s for s in listed.json() if s["name"] == "wiki")
    assert (wiki["state"], wiki["default_collection"], wiki["documents"], wiki["fragments"]) == (
        "active", "runbooks", 0, 0)

    created = ada_api.call("POST", "/sources", {"name": "chat-export", "kind": "chat", "collection": "incidents"})
    assert created.status_code == 201, created.text
    assert created.headers["Cache-Control"] == "no-store"
    credentials = created.json()["credentials"]
    assert created.json()["source"]["default_collection"] == "incidents"
    token = client_credentials_token(ada_api.base_url, credentials["client_id"], credentials["client_secret"])
    assert token.status_code == 200 and token.json()["scope"] == "ingest"
    as_ada = live_people.caller(live_people.ada)

    disabled = ada_api.call("POST", "/sources/chat-export/disable")
    assert disabled.status_code == 200 and disabled.json()["state"] == "disabled"
    assert sources.source_get(caller=as_ada, name="chat-export").disabled_at is not None
    enabled = ada_api.call("POST", "/sources/chat-export/enable")
    assert enabled.json()["state"] == "active"
    assert sources.source_get(caller=as_ada, name="chat-export").disabled_at is None

    rotated = ada_api.call("POST", "/sources/chat-export/rotate")
    assert rotated.status_code == 200 and rotated.headers["Cache-Control"] == "no-store"
    assert rotated.json()["client_secret"] != credentials["client_secret"]
    assert client_credentials_token(ada_api.base_url, credentials["client_id"],
                                    credentials["client_secret"]).status_code == 401
    assert client_credentials_token(ada_api.base_url, credentials["client_id"],
                                    rotated.json()["client_secret"]).status_code == 200

    revoked = ada_api.call("POST", "/sources/chat-export/revoke")
    assert revoked.status_code == 200 and revoked.json()["state"] == "revoked"
    states = {health.source.agent.name: health.state for health in sources.sources_health(caller=as_ada)}
    assert states["chat-export"] == "revoked"
    assert ada_api.call("POST", "/sources/nothing/disable").status_code == 404


def test_agents_are_listed_registered_rotated_and_revoked(ada_api, live_people):
    listed = ada_api.call("GET", "/agents")
    assert listed.status_code == 200
    assert listed.json() == [{"name": "triage-bot", "display_name": "triage-bot",
                              "scopes": ["memory.read", "memory.write"], "roles": ["engineering"], "revoked": False,
                              "client_id": live_people.triage_bot.client_id}]

    registered = ada_api.call("POST", "/agents", {"name": "digest-bot", "scopes": ["memory.read"],
                                                  "roles": ["sales"], "display_name": "Digest"})
    assert registered.status_code == 201, registered.text
    assert registered.headers["Cache-Control"] == "no-store"
    assert registered.json()["agent"]["roles"] == ["sales"]
    credentials = registered.json()["credentials"]
    token = client_credentials_token(ada_api.base_url, credentials["client_id"], credentials["client_secret"])
    assert token.status_code == 200 and token.json()["scope"] == "memory.read"
    as_ada = live_people.caller(live_people.ada)
    assert agents.agent_get(caller=as_ada, name="digest-bot").display_name == "Digest"
    # Agents are never granted memory.audit, nor the admin scope.
    for scopes in (["memory.audit"], [ADMIN_SCOPE]):
        refused = ada_api.call("POST", "/agents", {"name": "greedy-bot", "scopes": scopes})
        assert refused.status_code == 400 and refused.json()["error"]["field"] == "scopes"

    rotated = ada_api.call("POST", "/agents/digest-bot/rotate")
    assert rotated.status_code == 200 and rotated.headers["Cache-Control"] == "no-store"
    assert client_credentials_token(ada_api.base_url, credentials["client_id"],
                                    credentials["client_secret"]).status_code == 401

    revoked = ada_api.call("POST", "/agents/digest-bot/revoke")
    assert revoked.status_code == 200 and revoked.json()["revoked"] is True
    assert agents.agent_get(caller=as_ada, name="digest-bot").revoked_at is not None
    assert client_credentials_token(ada_api.base_url, credentials["client_id"],
                                    rotated.json()["client_secret"]).status_code == 401


# ---------------------------------------------------------------- every route, refused


def every_call(people) -> list[tuple[str, str, dict | None]]:
    """One request per route and method of the admin API, on acme's objects."""
    cleo = people.cleo.pk
    role = Role.objects.get(tenant=people.acme, name="sales").pk
    collection = people.collection("accounts").pk
    rule = AccessRule.objects.get(tenant=people.acme, role__name="sales", collection__name="accounts").pk
    return [
        ("GET", "/members", None),
        ("PATCH", f"/members/{cleo}", {"roles": ["sales"], "is_admin": True}),
        ("POST", f"/members/{cleo}/deactivate", None),
        ("POST", f"/members/{cleo}/reactivate", None),
        ("POST", f"/members/{cleo}/remove", None),
        ("GET", "/roles", None),
        ("POST", "/roles", {"name": "support"}),
        ("DELETE", f"/roles/{role}", None),
        ("GET", "/collections", None),
        ("POST", "/collections", {"name": "design"}),
        ("PATCH", f"/collections/{collection}", {"name": "customers"}),
        ("DELETE", f"/collections/{collection}", None),
        ("POST", f"/collections/{collection}/retire", {"confirm": "accounts"}),
        ("GET", "/access-rules", None),
        ("POST", "/access-rules", {"role": "sales", "collection": "runbooks"}),
        ("DELETE", f"/access-rules/{rule}", None),
        ("GET", "/sources", None),
        ("POST", "/sources", {"name": "chat-export"}),
        ("POST", "/sources/wiki/disable", None),
        ("POST", "/sources/wiki/enable", None),
        ("POST", "/sources/wiki/rotate", None),
        ("POST", "/sources/wiki/revoke", None),
        ("GET", "/agents", None),
        ("POST", "/agents", {"name": "digest-bot", "scopes": ["memory.read"]}),
        ("POST", "/agents/triage-bot/rotate", None),
        ("POST", "/agents/triage-bot/revoke", None),
    ]


def _has_an_id(path: str) -> bool:
    return any(part.isdigit() for part in path.split("/")) or path.startswith(("/sources/", "/agents/"))


def test_every_route_and_method_is_exercised(people):
    exercised = {(resolve(f"/api/admin{path}").url_name, method) for method, path, _ in every_call(people)}
    routes = set()
    for pattern in admin_urls:
        assert isinstance(pattern, URLPattern)
        view = pattern.callback.view_class  # type: ignore[attr-defined]
        for method in ("get", "post", "patch", "put", "delete"):
            if hasattr(view, method):
                routes.add((pattern.name, method.upper()))
    assert exercised == routes


def test_without_a_token_every_route_is_a_bearer_challenge(asgi_server, live_people):
    api = AdminAPI(base_url=asgi_server.url, token="")
    before = state(live_people.acme)
    for method, path, body in every_call(live_people):
        response = api.call(method, path, body)
        assert response.status_code == 401, (method, path, response.text)
        assert response.headers["WWW-Authenticate"].startswith('Bearer realm="memoryhub-admin"')
        assert 'resource_metadata="' in response.headers["WWW-Authenticate"]
        assert response.json()["error"]["code"] == "not_authenticated"
        assert api.call(method, path, body, token="not-a-token").status_code == 401
    assert state(live_people.acme) == before


def test_a_member_who_is_not_an_admin_is_refused_everywhere(asgi_server, live_people):
    # The OAuth server never issues him one (tests/oauth/test_admin_scope.py); a token
    # written straight to the database stands for one that outlived his admin days.
    bruno = AdminAPI(base_url=asgi_server.url, token=make_token(
        application=person_client(), user=live_people.bruno, scope=ADMIN_SCOPE, resource=[admin_api_url()]))
    before = state(live_people.acme)
    for method, path, body in every_call(live_people):
        response = bruno.call(method, path, body)
        assert response.status_code == 403, (method, path, response.text)
        assert response.json()["error"]["code"] == "permission_denied"
    assert state(live_people.acme) == before


def test_an_admin_of_another_workspace_finds_nothing_of_this_one(asgi_server, live_people):
    olga = admin_api_for(asgi_server.url, live_people.olga)
    before = state(live_people.acme)
    for method, path, body in every_call(live_people):
        if not _has_an_id(path):
            continue
        response = olga.call(method, path, body)
        assert response.status_code == 404, (method, path, response.text)
    assert state(live_people.acme) == before
    # Lists are of her own workspace.
    assert [m["username"] for m in olga.call("GET", "/members").json()] == ["olga"]
    assert [s["name"] for s in olga.call("GET", "/sources").json()] == ["globex-wiki"]


def test_an_admin_who_stops_being_one_is_refused_on_the_next_request(ada_api, live_people):
    as_ada = live_people.caller(live_people.ada)
    members.member_update(caller=as_ada, user_id=live_people.cleo.pk, is_admin=True)
    cleo = admin_api_for(ada_api.base_url, live_people.cleo)
    assert cleo.call("GET", "/members").status_code == 200
    members.member_update(caller=as_ada, user_id=live_people.cleo.pk, is_admin=False)
    # Demoting her ended her admin API credentials: the token is gone ...
    assert cleo.call("GET", "/members").status_code == 401
    # ... and being made an admin again revives none of them.
    members.member_update(caller=as_ada, user_id=live_people.cleo.pk, is_admin=True)
    assert cleo.call("GET", "/members").status_code == 401
    again = admin_api_for(ada_api.base_url, live_people.cleo)
    assert again.call("GET", "/members").status_code == 200
    members.member_deactivate(caller=as_ada, user_id=live_people.cleo.pk)
    assert again.call("GET", "/members").status_code == 401


def test_a_token_that_outlived_its_admin_is_refused_with_403(asgi_server, live_people):
    # Should a token outlive the admin flag (written straight to the database here),
    # the check on every request still refuses it.
    token = make_token(application=person_client(), user=live_people.cleo, scope=ADMIN_SCOPE,
                       resource=[admin_api_url()])
    refused = AdminAPI(base_url=asgi_server.url, token=token).call("GET", "/members")
    assert refused.status_code == 403 and refused.json()["error"]["code"] == "permission_denied"


def test_a_token_for_a_wider_resource_is_refused(asgi_server, live_people):
    # The library's own audience check is a URL prefix: a token for the origin's /api
    # would pass it. This API takes only tokens issued for exactly its resource.
    for resource in (admin_api_url().rsplit("/", 1)[0], f"{asgi_server.url}/"):
        token = make_token(application=person_client(), user=live_people.ada, scope=ADMIN_SCOPE, resource=[resource])
        answer = AdminAPI(base_url=asgi_server.url, token=token).call("GET", "/members")
        assert answer.status_code == 401, (resource, answer.text)


def test_connected_apps_show_an_admin_clients_grant_and_last_use(ada_api, live_people):
    assert ada_api.call("GET", "/members").status_code == 200
    apps = connected_apps.connected_apps_list(caller=live_people.caller(live_people.ada))
    admin_app = next(app for app in apps if ADMIN_SCOPE in app.scopes)
    assert admin_app.scopes == [ADMIN_SCOPE] and admin_app.connected and admin_app.last_used is not None


# ---------------------------------------------------------------- tokens of other resources


def _tools_list(base_url: str, path: str, token: str) -> httpx2.Response:
    return httpx2.post(f"{base_url}{path}", json={"jsonrpc": "2.0", "id": 1, "method": "tools/list", "params": {}},
                       headers={"Authorization": f"Bearer {token}", "Accept": "application/json, text/event-stream",
                                "MCP-Protocol-Version": "2025-06-18"}, timeout=30)


def test_an_admin_token_opens_no_mcp_endpoint(ada_api, live_people):
    for path in ("/mcp", "/mcp/readonly"):
        assert _tools_list(ada_api.base_url, path, ada_api.token).status_code == 401, path
    # Even one written for /mcp itself, holding only workspace.admin, opens no tool there.
    raw, _ = person_mcp_token(live_people.ada, scope=ADMIN_SCOPE)
    response = _tools_list(ada_api.base_url, "/mcp", raw)
    assert response.status_code == 401
    assert 'scope="' in response.headers["WWW-Authenticate"]
    assert ADMIN_SCOPE not in response.headers["WWW-Authenticate"]


def test_an_mcp_token_is_refused_here(ada_api, live_people):
    mcp = authorised(ada_api.base_url, live_people.ada, scope="memory.read memory.write",
                     resource=f"{ada_api.base_url}/mcp")
    assert _tools_list(ada_api.base_url, "/mcp", mcp["access_token"]).status_code == 200
    before = state(live_people.acme)
    response = ada_api.call("POST", "/roles", {"name": "support"}, token=mcp["access_token"])
    assert response.status_code == 401
    assert 'error="invalid_token"' in response.headers["WWW-Authenticate"]
    assert state(live_people.acme) == before


@pytest.mark.parametrize("who", ["agent", "source"])
def test_agent_and_source_tokens_are_refused_here(ada_api, live_people, who):
    credentials = live_people.triage_bot if who == "agent" else live_people.wiki_credentials
    token = client_credentials_token(ada_api.base_url, credentials.client_id, credentials.client_secret)
    assert token.status_code == 200
    response = ada_api.call("GET", "/members", token=token.json()["access_token"])
    # An agent's token is for /mcp, a source's for no resource at all: neither for this API.
    assert response.status_code == 401, response.text
    assert 'error="invalid_token"' in response.headers["WWW-Authenticate"]


def test_a_token_for_this_resource_without_the_scope_is_insufficient(ada_api, live_people):
    raw = make_token(application=person_client(), user=live_people.ada, scope="memory.read",
                     resource=[admin_api_url()])
    response = ada_api.call("GET", "/members", token=raw)
    assert response.status_code == 403
    assert response.json()["error"]["code"] == "insufficient_scope"
    assert response.headers["WWW-Authenticate"] == (
        f'Bearer realm="memoryhub-admin", error="insufficient_scope", scope="{ADMIN_SCOPE}"')
