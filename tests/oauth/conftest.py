"""OAuth helpers for the authorisation-server tests.

The personas are the root set (tests/conftest.py): in workspace "acme", ada
(admin) and bruno (member); in "globex", olga (admin); nomad, a person in no
workspace; triage-bot, the agent ada registered (`people.triage_bot`). Clients:
a public MCP client people authorise (`mcp_client`), and the agents.
"""

from __future__ import annotations

import base64
import hashlib
import secrets
from urllib.parse import parse_qs, urlencode, urlsplit

import pytest
from django.test import Client
from oauth2_provider.models import AccessToken, Application

from memoryhub.models import User
from memoryhub.oauth.tokens import token_checksum
from tests.conftest import signed_in

REDIRECT_URI = "http://127.0.0.1:8765/callback"
TEST_ORIGIN = "http://testserver"


def set_public_origin(settings, origin: str) -> None:
    """Point resource URLs and the issuer at `origin` (the test server's URL)."""
    settings.BASE_URL = origin
    settings.OAUTH2_PROVIDER = {**settings.OAUTH2_PROVIDER, "OIDC_ISS_ENDPOINT": origin}


@pytest.fixture(autouse=True)
def oauth_settings(settings):
    # Fast hashing and fresh throttle counters come from the root conftest (fast_people).
    set_public_origin(settings, TEST_ORIGIN)
    return settings


@pytest.fixture
def mcp_client(db) -> Application:
    """A public client as an MCP client registers itself."""
    return Application.objects.create(
        name="Notes app",
        client_type=Application.CLIENT_PUBLIC,
        authorization_grant_type=Application.GRANT_AUTHORIZATION_CODE,
        redirect_uris=REDIRECT_URI,
        registration_source=Application.RegistrationSource.DCR,
        client_secret="",
        hash_client_secret=False,
    )


def pkce_pair() -> tuple[str, str]:
    verifier = secrets.token_urlsafe(48)
    challenge = base64.urlsafe_b64encode(hashlib.sha256(verifier.encode()).digest()).decode().rstrip("=")
    return verifier, challenge


def authorize_params(application: Application, challenge: str, **overrides) -> dict:
    params = {
        "response_type": "code",
        "client_id": application.client_id,
        "redirect_uri": REDIRECT_URI,
        "scope": "memory.read memory.write",
        "state": "st-123",
        "code_challenge": challenge,
        "code_challenge_method": "S256",
        "resource": f"{TEST_ORIGIN}/mcp",
    }
    params.update(overrides)
    return {key: value for key, value in params.items() if value is not None}


def authorize_url(application: Application, challenge: str, **overrides) -> str:
    return "/o/authorize/?" + urlencode(authorize_params(application, challenge, **overrides))


def redirect_query(response) -> dict[str, str]:
    """The parameters of the redirect back to the client."""
    assert response.status_code == 302, response.content[:500]
    location = response["Location"]
    assert location.startswith(REDIRECT_URI), location
    return {key: values[0] for key, values in parse_qs(urlsplit(location).query).items()}


def consent(client: Client, application: Application, challenge: str, *, allow: bool = True, **overrides):
    """Open the consent page, then answer it. Returns the redirect response."""
    url = authorize_url(application, challenge, **overrides)
    page = client.get(url)
    assert page.status_code == 200, page.content[:500]
    # What the page's hidden fields carry back.
    data = {key: value for key, value in page.context["form"].initial.items() if value is not None}
    if allow:
        data["allow"] = "1"
    return client.post(url, data)


def authorization_code(user: User, application: Application, **overrides) -> tuple[str, str]:
    verifier, challenge = pkce_pair()
    params = redirect_query(consent(signed_in(user), application, challenge, **overrides))
    return params["code"], verifier


def exchange_code(application: Application, code: str, verifier: str, **extra) -> dict:
    data = {
        "grant_type": "authorization_code",
        "code": code,
        "redirect_uri": REDIRECT_URI,
        "client_id": application.client_id,
        "code_verifier": verifier,
        **extra,
    }
    response = Client().post("/o/token/", {k: v for k, v in data.items() if v is not None})
    return {"status": response.status_code, **response.json()}


def refresh(application: Application, refresh_token: str, **extra) -> dict:
    data = {"grant_type": "refresh_token", "refresh_token": refresh_token, "client_id": application.client_id,
            **extra}
    response = Client().post("/o/token/", data)
    return {"status": response.status_code, **response.json()}


def client_credentials(client_id: str, secret: str, **extra) -> dict:
    response = Client().post("/o/token/", {"grant_type": "client_credentials", **extra},
                             HTTP_AUTHORIZATION="Basic " + base64.b64encode(f"{client_id}:{secret}".encode()).decode())
    return {"status": response.status_code, **response.json()}


def stored_token(raw: str) -> AccessToken:
    return AccessToken.objects.get(token_checksum=token_checksum(raw))
