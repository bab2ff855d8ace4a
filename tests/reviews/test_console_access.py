"""Nobody but the workspace's own admins reaches the console: every review and
workspace-administration URL (the agents pages included), over real HTTP
against the running server, for members, people of no workspace, another
workspace's admin, strangers and an agent's bearer token. The URL list is
checked against the URLconf, so a new console URL cannot be left out."""

from __future__ import annotations

import re

import httpx2
import pytest
from django.urls import URLPattern, URLResolver, get_resolver

from memoryhub.models import (
    AccessRule,
    Agent,
    Collection,
    Fragment,
    Membership,
    Proposal,
    ReceiptCheckpoint,
    Role,
    Source,
    Tenant,
    User,
)
from memoryhub.services.fragments import fragment_write
from memoryhub.services.search import fragments_search
from tests.conftest import PASSWORD
from tests.pages.helpers import client_credentials, propose, set_public_origin, workspace_of

pytestmark = [pytest.mark.slow]

GET, POST = "GET", "POST"

# What only acme has (globex has its own runbooks and engineering, so those names say nothing).
ACME_ONLY = re.compile(r"Acme|cache-01|triage-bot|\bbruno\b|\bcleo\b|\bcarol\b|\bincidents\b")


def console_url_names() -> set[str]:
    names = set()

    def walk(patterns, namespace):
        for pattern in patterns:
            if isinstance(pattern, URLResolver):
                walk(pattern.url_patterns, pattern.namespace or namespace)
            elif isinstance(pattern, URLPattern) and namespace in ("reviews", "workspace") and pattern.name:
                names.add(f"{namespace}:{pattern.name}")

    walk(get_resolver().url_patterns, None)
    return names


def console_urls(people, proposal) -> dict[str, tuple[str, str, bool]]:
    """name -> (method, path, names an object of acme)."""
    role = Role.objects.get(tenant=people.acme, name="sales")
    rule = AccessRule.objects.filter(tenant=people.acme).first()
    collection = Collection.objects.get(tenant=people.acme, name="accounts")
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
        "workspace:member_erase": (POST, f"/workspace/members/{people.bruno.pk}/erase/", True),
        "workspace:member_password": (POST, f"/workspace/members/{people.bruno.pk}/password/", True),
        "workspace:member_lifecycle": (POST, f"/workspace/members/{people.bruno.pk}/deactivate/", True),
        "workspace:receipt_chain": (GET, "/workspace/receipts/", False),
        "workspace:receipt_checkpoint": (POST, "/workspace/receipts/checkpoint/", False),
        "workspace:role_add": (POST, "/workspace/roles/add/", False),
        "workspace:role_delete": (POST, f"/workspace/roles/{role.pk}/delete/", True),
        "workspace:collections": (GET, "/workspace/collections/", False),
        "workspace:collection_add": (POST, "/workspace/collections/add/", False),
        "workspace:collection_change": (POST, f"/workspace/collections/{collection.pk}/delete/", True),
        "workspace:access": (GET, "/workspace/access/", False),
        "workspace:access_grant": (POST, "/workspace/access/grant/", False),
        "workspace:access_revoke": (POST, f"/workspace/access/{rule.pk}/revoke/", True),
        "workspace:agents": (GET, "/workspace/agents/", False),
        "workspace:agent_add": (POST, "/workspace/agents/add/", False),
        "workspace:agent_rotate": (POST, "/workspace/agents/triage-bot/rotate/", True),
        "workspace:agent_revoke": (POST, "/workspace/agents/triage-bot/revoke/", True),
        "workspace:sources": (GET, "/workspace/sources/", False),
        "workspace:source_add": (POST, "/workspace/sources/add/", False),
        "workspace:source_rotate": (POST, "/workspace/sources/wiki/rotate/", True),
        "workspace:source_state": (POST, "/workspace/sources/wiki/disable/", True),
        "workspace:source_revoke": (POST, "/workspace/sources/wiki/revoke/", True),
        "workspace:settings": (GET, "/workspace/settings/", False),
    }


def post_body(people, proposal) -> dict:
    """Valid-looking input for every form, aimed at acme's objects (forms name roles and collections)."""
    return {
        "action": "approve", "proposals": [str(proposal.pk)], "reason": "intruder",
        "username": "intruder", "password": PASSWORD, "name": "intruder", "kind": "documents",
        "role": "sales", "collection": "accounts", "scopes": ["memory.read"],
        f"m{people.bruno.pk}-is_admin": "on", f"m{people.bruno.pk}-roles": ["leads"],
        "relevance_floor": "0.9", "write_policy": "open", "confirm": "bruno",
        f"p{people.bruno.pk}-password": "intruder-chosen-passphrase",
    }


def signed_in_http(base: str, user: User | None) -> httpx2.Client:
    """A browser-like client that signed in on the sign-in form (workspace, username, password)."""
    client = httpx2.Client(base_url=base, follow_redirects=False, timeout=30)
    client.get("/accounts/login/")
    if user is not None:
        response = client.post("/accounts/login/", data={
            "workspace": workspace_of(user), "username": user.username, "password": PASSWORD,
            "csrfmiddlewaretoken": client.cookies["csrftoken"],
        })
        assert response.status_code == 302, f"{user.username} could not sign in"
    return client


def acme_state(people) -> tuple:
    acme = Tenant.objects.get(pk=people.acme.pk)
    return (
        sorted(Proposal.objects.filter(tenant=acme).values_list("pk", "state")),
        sorted(Membership.objects.filter(tenant=acme).values_list("user__username", "is_admin")),
        sorted(Membership.objects.filter(tenant=acme).values_list("user__username", "roles__name")),
        sorted(User.objects.filter(tenant=acme).values_list("username", "is_active", "password")),
        sorted(Role.objects.filter(tenant=acme).values_list("name", flat=True)),
        sorted(Collection.objects.filter(tenant=acme).values_list("name", flat=True)),
        sorted(AccessRule.objects.filter(tenant=acme).values_list("role__name", "collection__name")),
        sorted(Source.objects.filter(tenant=acme).values_list("agent__name", "disabled_at",
                                                              "agent__application__client_secret")),
        sorted(Agent.objects.filter(tenant=acme).values_list("name", "revoked_at")),
        Agent.objects.get(pk=people.triage_bot.agent.pk).application.client_secret,
        (acme.judgment_plane, acme.relevance_floor, acme.write_policy),
        sorted(Fragment.objects.filter(tenant=acme).values_list("pk", "value")),
        ReceiptCheckpoint.objects.filter(tenant=acme).count(),
    )


def request(client: httpx2.Client, method: str, path: str, body: dict) -> httpx2.Response:
    if method == GET:
        return client.get(path)
    token = client.cookies.get("csrftoken", "")
    return client.post(path, data={**body, "csrfmiddlewaretoken": token})


def test_the_url_list_covers_every_console_url(people):
    proposal = propose(people.triage_bot, "A fact.")
    urls = console_urls(people, proposal)
    assert set(urls) == console_url_names()
    # The agents pages are part of the workspace console now.
    assert {name for name, (_, path, _) in urls.items() if path.startswith("/workspace/agents/")} == {
        "workspace:agents", "workspace:agent_add", "workspace:agent_rotate", "workspace:agent_revoke"}


def test_nobody_but_the_workspaces_admins_reaches_the_console(asgi_server, settings, live_people):
    people = live_people
    set_public_origin(settings, asgi_server.url)
    proposal = propose(people.triage_bot, "Acme's build cache lives on cache-01.")
    # Something to erase and a receipt chain to sign, so an intruder who could would change the state.
    fragment_write(caller=people.caller(people.bruno), content="Bruno's desk is by the window.")
    fragments_search(caller=people.caller(people.bruno), query="desk")
    urls = console_urls(people, proposal)
    body = post_body(people, proposal)
    before = acme_state(people)

    for user in (people.bruno, people.cleo, people.carol, people.nomad):
        client = signed_in_http(asgi_server.url, user)
        for name, (method, path, _) in urls.items():
            status = request(client, method, path, body).status_code
            assert status == 403, f"{user.username} {method} {path} ({name}) answered {status}"

    olga = signed_in_http(asgi_server.url, people.olga)
    for name, (method, path, names_acme_object) in urls.items():
        response = request(olga, method, path, body)
        if names_acme_object:
            assert response.status_code == 404, f"olga {method} {path} ({name}) answered {response.status_code}"
        else:
            # Her own workspace's pages: nothing of acme's on them, and acme's names are not valid choices.
            assert response.status_code in (200, 302, 400), f"olga {method} {path} ({name})"
            assert not ACME_ONLY.search(response.text), f"olga saw acme on {path}"

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
    ada = signed_in_http(asgi_server.url, people.ada)
    for name, (method, path, _) in urls.items():
        if method == GET:
            assert request(ada, GET, path, body).status_code == 200, f"ada GET {path} ({name})"
    rejected = request(ada, POST, urls["reviews:reject"][1], body)
    assert rejected.status_code == 302
    assert Proposal.objects.get(pk=proposal.pk).state == Proposal.State.REJECTED
    revoked = request(ada, POST, urls["workspace:agent_revoke"][1], {**body, "confirm": "triage-bot"})
    assert revoked.status_code == 302
    assert Agent.objects.get(pk=people.triage_bot.agent.pk).revoked_at is not None
