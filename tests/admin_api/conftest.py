"""The REST admin API as an admin's script sees it: a person authorises a client
on the consent page for the admin API's resource with `workspace.admin`, the
code is exchanged at /o/token/ over HTTP, and the API is called over HTTP
against the real ASGI application.

The personas are the root set (tests/conftest.py): ada administers "acme",
bruno is a member of it, olga administers "globex".
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import httpx2
import pytest
from oauth2_provider.models import Application

from memoryhub.access import ADMIN_SCOPE
from memoryhub.models import AccessRule, Agent, Collection, Fragment, Membership, Role, Source
from memoryhub.oauth.policy import admin_api_url
from tests.oauth.conftest import REDIRECT_URI, authorization_code


def person_client(name: str = "Admin script") -> Application:
    """A public client a person authorises, as one registers itself."""
    return Application.objects.create(
        name=name, client_type=Application.CLIENT_PUBLIC, client_secret="", hash_client_secret=False,
        authorization_grant_type=Application.GRANT_AUTHORIZATION_CODE, redirect_uris=REDIRECT_URI,
        registration_source=Application.RegistrationSource.DCR)


def authorised(base_url: str, user: Any, *, scope: str = ADMIN_SCOPE, resource: str | None = None) -> dict:
    """The token endpoint's answer (over HTTP) for a code `user` granted on the consent page."""
    application = person_client()
    code, verifier = authorization_code(user, application, scope=scope, resource=resource or admin_api_url())
    response = httpx2.post(f"{base_url}/o/token/", data={
        "grant_type": "authorization_code", "code": code, "redirect_uri": REDIRECT_URI,
        "client_id": application.client_id, "code_verifier": verifier}, timeout=30)
    assert response.status_code == 200, response.text
    return response.json()


@dataclass
class AdminAPI:
    base_url: str
    token: str

    def call(self, method: str, path: str, body: Any = None, *, token: str | None = None,
             content: bytes | None = None, content_type: str = "application/json") -> httpx2.Response:
        token = self.token if token is None else token
        headers = {"Authorization": f"Bearer {token}"} if token else {}
        if content is not None:
            headers["Content-Type"] = content_type
        return httpx2.request(method, f"{self.base_url}/api/admin{path}", json=body, content=content,
                              headers=headers, timeout=60)


def admin_api_for(base_url: str, user: Any) -> AdminAPI:
    answer = authorised(base_url, user)
    assert answer["scope"] == ADMIN_SCOPE
    return AdminAPI(base_url=base_url, token=answer["access_token"])


@pytest.fixture
def ada_api(asgi_server, live_people) -> AdminAPI:
    return admin_api_for(asgi_server.url, live_people.ada)


def state(tenant: Any) -> tuple:
    """Everything the admin API can change in `tenant`, to show a refused request changed nothing."""
    return (
        sorted(Membership.objects.filter(tenant=tenant).values_list(
            "user_id", "is_admin", "removed_at", "user__is_active", "roles__name"), key=str),
        sorted(Role.objects.filter(tenant=tenant).values_list("pk", "name", "description")),
        sorted(Collection.objects.filter(tenant=tenant).values_list("pk", "name", "deleted_at"), key=str),
        sorted(AccessRule.objects.filter(tenant=tenant).values_list("pk", "role_id", "collection_id")),
        sorted(Agent.objects.filter(tenant=tenant).values_list("pk", "name", "revoked_at", "application_id",
                                                               "application__client_secret"), key=str),
        sorted(Source.objects.filter(tenant=tenant).values_list("pk", "disabled_at", "default_collection_id"),
               key=str),
        Fragment.objects.filter(tenant=tenant, retired_at__isnull=True).count(),
    )
