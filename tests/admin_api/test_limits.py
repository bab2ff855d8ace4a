"""Bad input to the REST admin API: a clear 400 (413 past the body limit), and
nothing changes. Names at their limit and one past it. And the OpenAPI schema
describes every route with its security scheme."""

from __future__ import annotations

import httpx2
import pytest

from memoryhub.api.admin import BODY_MAX_BYTES, NAME_MAX_CHARS
from memoryhub.api.urls import admin_urls
from memoryhub.models import Collection, Role
from tests.admin_api.conftest import state


@pytest.mark.parametrize(("content", "field"), [
    (b'{"name": "sup', None),
    (b'["support"]', None),
    (b'{"name": "sup\\u0000port"}', "name"),
    (b'{"name": "\\ud800"}', "name"),
    (b'{"name": "support", "description": "a\\u0000"}', "description"),
    (b'{"name": "support", "colour": "red"}', "colour"),
    (b'{"name": 7}', "name"),
    (b'{"description": "no name"}', "name"),
    (b'{"name": "   "}', "name"),
])
def test_a_bad_body_is_a_clear_400_and_changes_nothing(ada_api, live_people, content, field):
    before = state(live_people.acme)
    response = ada_api.call("POST", "/roles", content=content)
    assert response.status_code == 400, response.text
    error = response.json()["error"]
    assert error["message"]
    if field is not None:
        assert error["field"] == field
    assert state(live_people.acme) == before


def test_names_at_their_limit_and_one_past_it(ada_api, live_people):
    at_limit, past = "r" * NAME_MAX_CHARS, "r" * (NAME_MAX_CHARS + 1)
    assert ada_api.call("POST", "/roles", {"name": at_limit}).status_code == 201
    assert Role.objects.filter(tenant=live_people.acme, name=at_limit).exists()
    before = state(live_people.acme)
    for path, body, field in [
        ("/roles", {"name": past}, "name"),
        ("/roles", {"name": "ok", "description": "d" * 201}, "description"),
        ("/collections", {"name": "c" * (NAME_MAX_CHARS + 1)}, "name"),
        ("/sources", {"name": "s" * (NAME_MAX_CHARS + 1)}, "name"),
        ("/sources", {"name": "ok", "kind": "k" * (NAME_MAX_CHARS + 1)}, "kind"),
        ("/agents", {"name": "a" * (NAME_MAX_CHARS + 1), "scopes": ["memory.read"]}, "name"),
        ("/agents", {"name": "ok", "scopes": ["memory.read"], "display_name": "d" * 201}, "display_name"),
        ("/access-rules", {"role": past, "collection": "runbooks"}, "role"),
    ]:
        response = ada_api.call("POST", path, body)
        assert response.status_code == 400, (path, response.text)
        assert response.json()["error"]["field"] == field, path
    accounts = Collection.objects.get(tenant=live_people.acme, name="accounts").pk
    renamed = ada_api.call("PATCH", f"/collections/{accounts}", {"name": "c" * (NAME_MAX_CHARS + 1)})
    assert renamed.status_code == 400
    member = ada_api.call("PATCH", f"/members/{live_people.cleo.pk}", {"roles": [past]})
    assert member.status_code == 400 and member.json()["error"]["field"] == "roles"
    flag = ada_api.call("PATCH", f"/members/{live_people.cleo.pk}", {"is_admin": "yes"})
    assert flag.status_code == 400 and flag.json()["error"]["field"] == "is_admin"
    assert state(live_people.acme) == before
    assert ada_api.call("POST", "/collections", {"name": "c" * NAME_MAX_CHARS}).status_code == 201


def test_a_body_past_the_limit_is_refused_before_it_is_read(ada_api, live_people):
    before = state(live_people.acme)
    padding = "x" * BODY_MAX_BYTES
    response = ada_api.call("POST", "/roles", content=f'{{"name": "big", "description": "{padding}"}}'.encode())
    assert response.status_code == 413
    assert response.json()["error"]["code"] == "request_too_large"
    assert state(live_people.acme) == before


def test_only_json_is_taken(ada_api, live_people):
    response = ada_api.call("POST", "/roles", content=b"name=support", content_type="application/x-www-form-urlencoded")
    assert response.status_code == 415
    assert not Role.objects.filter(name="support").exists()


def test_the_schema_describes_every_admin_route_and_its_scope(asgi_server):
    response = httpx2.get(f"{asgi_server.url}/api/schema", headers={"Accept": "application/json"},
                          params={"format": "json"}, timeout=60)
    assert response.status_code == 200
    schema = response.json()
    paths = schema["paths"]
    for pattern in admin_urls:
        template = "/api/admin/" + str(pattern.pattern).replace("<int:", "{").replace("<str:", "{").replace(">", "}")
        assert template in paths, (template, sorted(paths))
        for operation in paths[template].values():
            assert operation["security"] == [{"workspaceAdmin": ["workspace.admin"]}], template
    scheme = schema["components"]["securitySchemes"]["workspaceAdmin"]
    assert scheme["type"] == "oauth2"
    flow = scheme["flows"]["authorizationCode"]
    assert list(flow["scopes"]) == ["workspace.admin"]
    assert flow["authorizationUrl"] == "/o/authorize/" and flow["tokenUrl"] == "/o/token/"


@pytest.mark.parametrize("name", [
    "<script>x</script>", "\x1b[31mred\x1b[0m", "\u0435ngineering", "caf\u00e9", "on call!", "-leading", "a\u202eb",
])
def test_a_name_that_would_lose_characters_is_refused_not_rewritten(ada_api, live_people, name):
    """Each of these used to be slugified into a name nobody typed ("scriptxscript",
    "31mred0m", "ngineering"); now every creating route refuses it and changes nothing."""
    before = state(live_people.acme)
    for path, body in [("/roles", {"name": name}), ("/collections", {"name": name}), ("/sources", {"name": name}),
                       ("/agents", {"name": name, "scopes": ["memory.read"]})]:
        response = ada_api.call("POST", path, body)
        assert response.status_code == 400, (path, response.text)
        error = response.json()["error"]
        assert error["field"] == "name", path
        # The name is echoed with anything unusual escaped: no raw ESC, no look-alike letter.
        assert error["message"].isascii() and "\x1b" not in error["message"], error["message"]
    accounts = Collection.objects.get(tenant=live_people.acme, name="accounts").pk
    assert ada_api.call("PATCH", f"/collections/{accounts}", {"name": name}).status_code == 400
    member = ada_api.call("PATCH", f"/members/{live_people.cleo.pk}", {"roles": [name]})
    assert member.status_code == 400 and member.json()["error"]["field"] == "roles", member.text
    assert state(live_people.acme) == before


def test_spaces_and_capitals_are_written_the_stored_way(ada_api, live_people):
    created = ada_api.call("POST", "/roles", {"name": "  On Call  "})
    assert created.status_code == 201, created.text
    assert Role.objects.filter(tenant=live_people.acme, name="on-call").exists()
