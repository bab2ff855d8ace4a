"""Hostile bytes on every URL of the project: no 500, nothing written.

The URL patterns are enumerated from the URLconf, so a new URL is covered
automatically. Each parameter position gets a NUL (in a path parameter, a query
parameter, a form field, a JSON string, a header, a cookie, Basic credentials)
and a lone surrogate where one can arrive (a JSON \\ud800 escape): each must be
refused with a 400 naming where, and no row may be written. Over-long and
wrong-typed values in every position must not give a 500 either.
"""

from __future__ import annotations

import base64
import json
import uuid
from collections.abc import Iterator
from dataclasses import dataclass

import pytest
from django.test import Client
from django.urls import URLPattern, URLResolver, get_resolver

from memoryhub import models
from tests.conftest import signed_in

# Names the project's views, forms and the OAuth toolkit read (a superset is harmless).
PARAMETERS = (
    "q", "receipt", "as_of", "limit", "cursor", "show", "page", "agent", "age", "state", "collection", "person", "next",
    "workspace", "username", "password", "email", "roles", "is_admin", "name", "description", "role", "kind",
    "scopes", "display_name", "judgment_plane", "relevance_floor", "write_policy", "blocked_terms", "content",
    "reason", "action", "proposals", "client_id", "client_secret", "redirect_uri", "response_type", "scope",
    "state", "code_challenge", "code_challenge_method", "resource", "grant_type", "code", "code_verifier",
    "refresh_token", "token", "token_type_hint", "subject_token", "subject_token_type", "audience", "allow",
    "resource_id", "title", "uri", "created_at", "text", "receipt_id", "query",
)
JSON_FIELDS = ("redirect_uris", "client_name", "scope", "resource_id", "title", "uri", "text", "collection",
               "query", "content", "receipt_id", "grant_types", "token_endpoint_auth_method")
SAMPLE = {"int": "1", "uuid": str(uuid.UUID(int=1)), "slug": "x", "str": "x", "path": "x"}
COUNTED = ("Fragment", "Proposal", "Receipt", "IdempotencyRecord", "User", "Membership", "Role", "Collection",
           "AccessRule", "Agent", "Source", "Resource", "Tenant", "EnforcementAlarm")


@dataclass(frozen=True)
class Route:
    template: str  # e.g. "/receipts/{receipt_id}/"
    converters: dict[str, str]  # parameter -> converter name

    def url(self, **values: str) -> str:
        filled = {name: values.get(name, SAMPLE[kind]) for name, kind in self.converters.items()}
        return self.template.format(**filled)


def _converter_name(converter: object) -> str:
    return {"IntConverter": "int", "UUIDConverter": "uuid", "SlugConverter": "slug", "PathConverter": "path"}.get(
        type(converter).__name__, "str")


def routes(resolver: URLResolver | None = None, prefix: str = "", converters: dict | None = None) -> Iterator[Route]:
    resolver = resolver or get_resolver()
    converters = converters or {}
    for entry in resolver.url_patterns:
        pattern = entry.pattern
        text = str(pattern)
        found = dict(converters)
        for name, converter in getattr(pattern, "converters", {}).items():
            found[name] = _converter_name(converter)
        text = _template(text)
        if isinstance(entry, URLResolver):
            yield from routes(entry, prefix + text, found)
        elif isinstance(entry, URLPattern):
            if text.startswith("^") or "(?P" in text:
                continue  # the Django admin's regex routes: not ours, and Django's own
            yield Route("/" + prefix + text, found)


def _template(route: str) -> str:
    out, rest = "", route
    while "<" in rest:
        before, _, after = rest.partition("<")
        inner, _, rest = after.partition(">")
        out += before + "{" + inner.split(":")[-1] + "}"
    return out + rest


ROUTES = sorted({route.template: route for route in routes()}.values(), key=lambda r: r.template)


def test_the_urlconf_is_walked():
    templates = {route.template for route in ROUTES}
    for expected in ("/receipts/{receipt_id}/", "/o/token/", "/o/register/", "/api/ingest/documents",
                     "/workspace/members/{user_id}/", "/reviews/{proposal_id}/approve/", "/memory/", "/connect/"):
        assert expected in templates, sorted(templates)


def counts() -> dict[str, int]:
    return {name: getattr(models, name).objects.count() for name in COUNTED}


def basic(client_id: str, secret: str) -> str:
    return "Basic " + base64.b64encode(f"{client_id}:{secret}".encode()).decode()


def hostile_requests(route: Route) -> Iterator[tuple[str, str, dict]]:
    """(method, url, client kwargs) with one NUL or lone surrogate each."""
    for name, kind in route.converters.items():
        if kind in ("str", "path", "slug"):
            yield "get", route.url(**{name: "%00"}), {}
            yield "post", route.url(**{name: "x%00"}), {}
    url = route.url()
    # The hostile value alone, and last among every other parameter with a sound value.
    for name in ("q", "client_id", PARAMETERS[-1]):
        sound = {other: "ok" for other in PARAMETERS if other != name}
        yield "get", f"{url}?{name}=%00", {}
        yield "get", url + "?" + "&".join(f"{k}={v}" for k, v in sound.items()) + f"&{name}=a%00", {}
        yield "post", url, {"data": {**sound, name: "a\x00b"}}
        yield "post", url, {"data": json.dumps({**sound, name: "a\u0000b"}), "content_type": "application/json"}
        # A lone surrogate can only arrive as a JSON escape (percent-encoded it is invalid UTF-8, decoded as U+FFFD).
        yield "post", url, {"data": json.dumps({name: "x"}).replace('"x"', '"\\ud800"'),
                            "content_type": "application/json"}
    yield "post", url, {"data": json.dumps({"redirect_uris": ["https://ok.test/cb", "a\x00"]}),
                        "content_type": "application/json"}
    yield "post", url, {"data": json.dumps({"resources": [{"id": "ok", "title": "\x00"}]}),
                        "content_type": "application/json"}
    yield "get", url, {"HTTP_X_CLIENT": "a\x00b"}
    yield "post", url, {"HTTP_AUTHORIZATION": basic("%00", "%00"), "data": {"grant_type": "client_credentials"}}
    yield "post", url, {"HTTP_AUTHORIZATION": basic("\x00", "\x00"), "data": {"grant_type": "client_credentials"}}


def odd_requests(route: Route) -> Iterator[tuple[str, str, dict]]:
    """Over-long and wrong-typed values in every position (no middleware refuses these)."""
    long = "x" * 20000
    for name, kind in route.converters.items():
        if kind in ("str", "path", "slug"):
            yield "get", route.url(**{name: long}), {}
    url = route.url()
    # A page cursor whose instant PostgreSQL cannot take (an offset of nearly a day, one with seconds and a
    # fraction); digits int() does not read though str.isdigit() says they are digits.
    cursors = [base64.urlsafe_b64encode(text.encode()).decode().rstrip("=") for text in (
        "2026-01-01T00:00:00+23:59|x", "2026-01-01T00:00:00+05:30:15.5|00000000-0000-0000-0000-000000000000")]
    for value in (long, "-1", "99999999999999999999999999", "%ff%fe", "0001-01-01T00:00:00%2B01:00", *cursors,
                  "%C2%B2", "%D9%A3"):
        query = "&".join(f"{name}={value}" for name in PARAMETERS)
        yield "get", f"{url}?{query}", {}
        yield "post", url, {"data": {name: value for name in PARAMETERS}}
    for value in (long, -1, None, {"a": 1}, "0001-01-01T00:00:00+01:00", [[]], [{}], [1, True]):
        yield "post", url, {"data": json.dumps({name: value for name in PARAMETERS + JSON_FIELDS}),
                            "content_type": "application/json"}
    yield "post", url, {"data": "[1, 2", "content_type": "application/json"}
    yield "post", url, {"data": "[" * 5000 + "]" * 5000, "content_type": "application/json"}
    yield "post", url, {"data": '{"a": ' * 3000 + "1" + "}" * 3000, "content_type": "application/json"}
    yield "post", url, {"data": b"\xff\xfe\x00", "content_type": "application/json"}
    # Basic credentials that are not base64 of ASCII at all (a header's bytes arrive decoded as Latin-1).
    yield "get", url, {"HTTP_AUTHORIZATION": "Basic \u00c3\u00a9"}
    yield "post", url, {"HTTP_AUTHORIZATION": "Basic \u00c3\u00a9", "data": {"grant_type": "client_credentials"}}
    # A grant this server does not offer, without the parameters it would need.
    yield "post", url, {"data": {"grant_type": "urn:ietf:params:oauth:grant-type:device_code"}}


def send(client: Client, method: str, url: str, kwargs: dict):
    extra = dict(kwargs)
    data = extra.pop("data", None)
    content_type = extra.pop("content_type", None)
    if method == "get":
        return client.get(url, **extra)
    if content_type is not None:
        return client.post(url, data=data, content_type=content_type, **extra)
    return client.post(url, data=data or {}, **extra)


@pytest.fixture
def clients(people, settings):
    settings.DEBUG = False
    anonymous = Client(raise_request_exception=False)
    admin = signed_in(people.ada)
    admin.raise_request_exception = False
    return {"anonymous": anonymous, "admin": admin}


@pytest.mark.parametrize("route", ROUTES, ids=[route.template for route in ROUTES])
def test_hostile_characters_get_a_400_and_write_nothing(route, clients, people):
    before = counts()
    for who, client in clients.items():
        for method, url, kwargs in hostile_requests(route):
            response = send(client, method, url, kwargs)
            body = response.content.decode(errors="replace")
            assert response.status_code == 400, (who, method, url, kwargs, body[:300])
            assert "NUL" in body or "surrogate" in body, (who, method, url, kwargs, body[:300])
    assert counts() == before


@pytest.mark.parametrize("route", ROUTES, ids=[route.template for route in ROUTES])
def test_over_long_and_wrong_typed_values_get_no_500(route, clients):
    # Signed in, so every view does its work rather than asking to sign in.
    for who, client in (("admin", clients["admin"]),):
        for method, url, kwargs in odd_requests(route):
            response = send(client, method, url, kwargs)
            assert response.status_code < 500, (who, method, url[:200], str(kwargs)[:300], response.content[:300])


@pytest.mark.parametrize("where, request_kwargs, named", [
    ("query", {"path": "/receipts/?cursor=%00"}, "query parameter 'cursor'"),
    ("path", {"path": "/receipts/%00/"}, "the path"),
    ("form", {"path": "/o/token/", "data": {"grant_type": "client_credentials", "client_id": "\x00"}},
     "form field 'client_id'"),
    ("json", {"path": "/o/register/", "data": '{"client_name": "\\ud800"}', "content_type": "application/json"},
     "JSON field client_name"),
    ("basic", {"path": "/o/token/", "data": {"grant_type": "client_credentials"},
               "HTTP_AUTHORIZATION": basic("\x00", "x")}, "the client id in the Basic credentials"),
    ("cookie", {"path": "/memory/", "cookie": "a\x00"}, "cookie 'sessionid'"),
])
def test_the_refusal_names_where(clients, where, request_kwargs, named):
    kwargs = dict(request_kwargs)
    path = kwargs.pop("path")
    client = Client(raise_request_exception=False)
    cookie = kwargs.pop("cookie", None)
    if cookie is not None:
        client.cookies["sessionid"] = cookie
    response = client.post(path, **kwargs) if "data" in kwargs else client.get(path, **kwargs)
    assert response.status_code == 400, response.content
    assert named in response.content.decode(), response.content
