"""Nobody but the workspace's own admins reaches the console: every review and
workspace-administration URL, over real HTTP against the running server, for
members, people of no workspace, another workspace's admin, strangers and an
agent's bearer token. The URL list is checked against the URLconf, so a new
console URL cannot be left out."""

from __future__ import annotations

import re

import httpx2
import pytest
from django.urls import URLPattern, URLResolver, get_resolver

from memoryhub.models import AccessRule, Collection, Membership, Proposal, Role, Source, Tenant
from tests.oauth.conftest import client_credentials, set_public_origin
from tests.pages.personas import PASSWORD, propose

pytestmark = [pytest.mark.slow]

GET, POST = "GET", "POST"


def console_url_names() -> set[str]:
    names = set()

    def walk(patterns, namespace):
        for pattern in patterns:
            if isinstance(pattern, URLResolver):
                walk(pattern.url_patterns, pattern.namespace or namespace)
            elif isinstance(pattern, URLPattern) and namespace in ("reviews", "workspace") and pattern.name:
                names.add(f"{namespace}:{pattern.name}")

    walk(get_resolver().url_patterns, None)
    return names | {"agent_list", "agent_add", "agent_rotate", "agent_revoke"}


def console_urls(people, proposal) -> dict[str, tuple[str, str, bool]]:
    """name -> (method, path, names an object of acme)."""
    role = Role.objects.get(tenant=people.acme, name="sales")
    rule = AccessRule.objects.filter(tenant=people.acme).first()
    return {
        "reviews:queue": (GET, "/reviews/", False),
        "reviews:history": (GET, "/reviews/history/", False),
        "reviews:bulk": (POST, "/reviews/bulk/", False),
        "reviews:detail": (GET, f"/reviews/{proposal.pk}/", True),
        "reviews:approve": (POST, f"/reviews/{proposal.pk}/approve/", True),
        "reviews:reject": (POST, f"/reviews/{proposal.pk}/reject/", True),
        "workspace:overview": (GET, "/workspace/", False),
        "workspace:members": (GET, "/workspace/members/", False),
        "workspace:member_add": (POST, "/workspace/members/add/", False),
        "workspace:member_update": (POST, f"/workspace/members/{people.bruno.pk}/", True),
        "workspace:role_add": (POST, "/workspace/roles/add/", False),
        "workspace:role_delete": (POST, f"/workspace/roles/{role.pk}/delete/", True),
        "workspace:collections": (GET, "/workspace/collections/", False),
        "workspace:collection_add": (POST, "/workspace/collections/add/", False),
        "workspace:access": (GET, "/workspace/access/", False),
        "workspace:access_grant": (POST, "/workspace/access/grant/", False),
        "workspace:access_revoke": (POST, f"/workspace/access/{rule.pk}/revoke/", True),
        "workspace:sources": (GET, "/workspace/sources/", False),
        "workspace:source_add": (POST, "/workspace/sources/add/", False),
        "workspace:settings": (GET, "/workspace/settings/", False),
        "agent_list": (GET, "/workspace/agents/", False),
        "agent_add": (POST, "/workspace/agents/add/", False),
        "agent_rotate": (POST, "/workspace/agents/triage-bot/rotate/", True),
        "agent_revoke": (POST, "/workspace/agents/triage-bot/revoke/", True),
    }


def post_body(people, proposal) -> dict:
    """Valid-looking input for every form, aimed at acme's objects."""
    role = Role.objects.get(tenant=people.acme, name="sales")
    accounts = Collection.objects.get(tenant=people.acme, name="accounts")
    return {
        "action": "approve", "proposals": [str(proposal.pk)], "reason": "intruder",
        "username": "intruder", "password": PASSWORD, "name": "intruder", "kind": "documents",
        "role": str(role.pk), "collection": str(accounts.pk), "scopes": ["memory.read"],
        f"m{people.bruno.pk}-is_admin": "on", "relevance_floor": "0.9", "write_policy": "open",
    }


def signed_in_http(base: str, username: str | None) -> httpx2.Client:
    client = httpx2.Client(base_url=base, follow_redirects=False, timeout=30)
    client.get("/accounts/login/")
    if username:
        response = client.post("/accounts/login/", data={
            "username": username, "password": PASSWORD, "csrfmiddlewaretoken": client.cookies["csrftoken"],
        })
        assert response.status_code == 302, f"{username} could not sign in"
    return client


def acme_state(people) -> tuple:
    acme = Tenant.objects.get(pk=people.acme.pk)
    return (
        sorted(Proposal.objects.filter(tenant=acme).values_list("pk", "state")),
        sorted(Membership.objects.filter(tenant=acme).values_list("user__username", "is_admin")),
        sorted(Role.objects.filter(tenant=acme).values_list("name", flat=True)),
        sorted(Collection.objects.filter(tenant=acme).values_list("name", flat=True)),
        sorted(AccessRule.objects.filter(tenant=acme).values_list("role__name", "collection__name")),
        sorted(Source.objects.filter(tenant=acme).values_list("agent__name", flat=True)),
        (acme.judgment_plane, acme.relevance_floor, acme.write_policy),
        people.triage_bot.agent.__class__.objects.get(pk=people.triage_bot.agent.pk).revoked_at,
    )


def request(client: httpx2.Client, method: str, path: str, body: dict) -> httpx2.Response:
    if method == GET:
        return client.get(path)
    token = client.cookies.get("csrftoken", "")
    return client.post(path, data={**body, "csrfmiddlewaretoken": token})


def test_the_url_list_covers_every_console_url(people):
    proposal = propose(people.triage_bot, "A fact.")
    assert set(console_urls(people, proposal)) == console_url_names()


def test_nobody_but_the_workspaces_admins_reaches_the_console(asgi_server, settings, people):
    set_public_origin(settings, asgi_server.url)
    proposal = propose(people.triage_bot, "Acme's build cache lives on cache-01.")
    urls = console_urls(people, proposal)
    body = post_body(people, proposal)
    before = acme_state(people)

    for username in ("bruno", "carol", "nomad"):
        client = signed_in_http(asgi_server.url, username)
        for name, (method, path, _) in urls.items():
            status = request(client, method, path, body).status_code
            assert status == 403, f"{username} {method} {path} ({name}) answered {status}"

    olga = signed_in_http(asgi_server.url, "olga")
    for name, (method, path, names_acme_object) in urls.items():
        response = request(olga, method, path, body)
        if names_acme_object:
            assert response.status_code == 404, f"olga {method} {path} ({name}) answered {response.status_code}"
        else:
            # Her own workspace's pages: nothing of acme's on them, and acme's ids are not valid choices.
            assert response.status_code in (200, 302, 400), f"olga {method} {path} ({name})"
            assert not re.search(r"Acme|cache-01|triage-bot|runbooks|bruno", response.text), f"olga saw acme on {path}"

    stranger = signed_in_http(asgi_server.url, None)
    token = client_credentials(people.triage_bot.client_id, people.triage_bot.client_secret,
                               resource=f"{asgi_server.url}/mcp")["access_token"]
    bearer = httpx2.Client(base_url=asgi_server.url, follow_redirects=False, timeout=30,
                           headers={"Authorization": f"Bearer {token}"})
    for name, (method, path, _) in urls.items():
        for client in (stranger, bearer):
            response = request(client, method, path, body)
            if method == GET:
                assert response.status_code == 302, f"{method} {path} ({name})"
                assert response.headers["location"].startswith("/accounts/login/")
            else:
                assert response.status_code in (302, 403), f"{method} {path} ({name}) answered {response.status_code}"

    assert acme_state(people) == before

    # The same requests work for acme's admin: the refusals above were about who asked.
    ada = signed_in_http(asgi_server.url, "ada")
    for name, (method, path, _) in urls.items():
        if method == GET:
            assert request(ada, GET, path, body).status_code == 200, f"ada GET {path} ({name})"
    rejected = request(ada, POST, urls["reviews:reject"][1], body)
    assert rejected.status_code == 302
    assert Proposal.objects.get(pk=proposal.pk).state == Proposal.State.REJECTED
