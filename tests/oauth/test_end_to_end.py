"""A real OAuth client (authlib) against the real ASGI server, with the person's
sign-in, consent and disconnect done in Chromium."""

from __future__ import annotations

from urllib.parse import parse_qs, urlsplit

import pytest
import requests
from asgiref.sync import async_to_sync
from authlib.integrations.requests_client import OAuth2Session
from authlib.integrations.requests_client import OAuthError as AuthlibError
from django.utils import timezone

from memoryhub.mcp_adapter.verifier import DatabaseTokenVerifier
from tests.conftest import PASSWORD
from tests.oauth.browser import Callback, in_browser, sign_in
from tests.oauth.conftest import authorize_url, pkce_pair, set_public_origin, stored_token

pytestmark = [pytest.mark.browser, pytest.mark.slow]


@pytest.fixture
def server(asgi_server, settings, monkeypatch):
    set_public_origin(settings, asgi_server.url)
    # authlib insists on https except when told this is a test on loopback.
    monkeypatch.setenv("AUTHLIB_INSECURE_TRANSPORT", "1")
    return asgi_server


def discover(base: str) -> dict:
    resource_meta = requests.get(f"{base}/.well-known/oauth-protected-resource/mcp", timeout=10).json()
    assert resource_meta["resource"] == f"{base}/mcp"
    issuer = resource_meta["authorization_servers"][0]
    meta = requests.get(f"{issuer}/.well-known/oauth-authorization-server", timeout=10).json()
    assert meta["issuer"] == issuer
    assert meta["code_challenge_methods_supported"] == ["S256"]
    return {**meta, "resource": resource_meta["resource"]}


def test_a_person_connects_a_client_refreshes_and_disconnects_it(server, live_people):
    base = server.url
    meta = discover(base)

    with Callback() as callback:
        registration = requests.post(meta["registration_endpoint"], timeout=10, json={
            "client_name": "Field notes", "redirect_uris": [callback.url], "token_endpoint_auth_method": "none",
            "grant_types": ["authorization_code", "refresh_token"], "scope": "memory.read memory.write",
        })
        assert registration.status_code == 201, registration.text
        client_id = registration.json()["client_id"]

        oauth = OAuth2Session(client_id, redirect_uri=callback.url, scope="memory.read memory.write",
                              code_challenge_method="S256", token_endpoint_auth_method="none")
        verifier = "v" * 20 + "erifier-" + "x" * 30
        authorize_url, state = oauth.create_authorization_url(meta["authorization_endpoint"],
                                                              code_verifier=verifier, resource=meta["resource"])

        def sign_in_and_allow(page):
            page.goto(authorize_url)
            sign_in(page, "acme", "bruno", PASSWORD)
            page.wait_for_selector("#consent-title")
            consent_text = page.inner_text("main")
            page.click("button[name=allow]")
            page.wait_for_url(f"{callback.url}*")
            return consent_text

        consent_text = in_browser(sign_in_and_allow)
        assert "Field notes wants to use your memory" in consent_text
        assert "Acme Inc." in consent_text
        assert "Search the memory you can see in Acme Inc." in consent_text

        [returned] = callback.received
        answer = {key: values[0] for key, values in parse_qs(urlsplit(returned).query).items()}
        assert answer["state"] == state
        assert answer["iss"] == meta["issuer"]  # RFC 9207

        token = oauth.fetch_token(meta["token_endpoint"], authorization_response=returned, code_verifier=verifier,
                                  resource=meta["resource"])
    assert token["expires_in"] == 900
    assert token["token_type"] == "Bearer"
    stored = stored_token(token["access_token"])
    assert 890 < (stored.expires - timezone.now()).total_seconds() <= 900
    assert stored.resource == [f"{base}/mcp"]

    verify = async_to_sync(DatabaseTokenVerifier().verify)
    principal = verify(token["access_token"], resource=f"{base}/mcp")
    assert (principal.subject, principal.kind, principal.tenant) == (
        "user:bruno", "user", str(live_people.bruno.tenant_id))
    assert verify(token["access_token"], resource=f"{base}/mcp/readonly") is None

    refreshed = oauth.refresh_token(meta["token_endpoint"], refresh_token=token["refresh_token"])
    assert refreshed["refresh_token"] != token["refresh_token"]
    assert refreshed["expires_in"] == 900

    def disconnect(page):
        page.goto(f"{base}/accounts/login/?next=/account/apps/")
        sign_in(page, "acme", "bruno", PASSWORD)
        page.wait_for_selector("text=Field notes")
        before = page.inner_text("main")
        page.click("button:has-text('Disconnect')")
        page.wait_for_selector(".message--success")
        return before, page.inner_text("main")

    before, after = in_browser(disconnect)
    assert "keeps working until it expires, at most 15 minutes" in before
    assert "Disconnected" in after

    with pytest.raises(AuthlibError) as refused:
        oauth.refresh_token(meta["token_endpoint"], refresh_token=refreshed["refresh_token"])
    assert refused.value.error == "invalid_grant"


def test_an_agent_gets_an_hour_long_token_and_no_refresh_token(server, live_people):
    meta = discover(server.url)
    oauth = OAuth2Session(live_people.triage_bot.client_id, live_people.triage_bot.client_secret,
                          token_endpoint_auth_method="client_secret_basic")
    token = oauth.fetch_token(meta["token_endpoint"], grant_type="client_credentials", resource=meta["resource"])
    assert token["expires_in"] == 3600
    assert "refresh_token" not in token
    assert token["scope"] == "memory.read memory.write"
    stored = stored_token(token["access_token"])
    assert 3590 < (stored.expires - timezone.now()).total_seconds() <= 3600
    principal = async_to_sync(DatabaseTokenVerifier().verify)(token["access_token"], resource=f"{server.url}/mcp")
    assert (principal.subject, principal.kind) == ("agent:triage-bot", "agent")
    assert "memory.audit" not in principal.scopes


def test_pages_get_their_stylesheet(server):
    response = requests.get(f"{server.url}/static/css/app.css", timeout=10)
    assert response.status_code == 200, "the ASGI application does not serve /static/ yet"
    assert response.headers["Content-Type"].startswith("text/css")


def test_the_consent_page_fits_a_phone(server, live_people, mcp_client):
    _, challenge = pkce_pair()
    url = server.url + authorize_url(mcp_client, challenge, resource=f"{server.url}/mcp")

    def look(page):
        page.set_viewport_size({"width": 360, "height": 740})
        page.goto(url)
        sign_in(page, "acme", "bruno", PASSWORD)
        page.wait_for_selector("#consent-title")
        scroll_width = page.evaluate("document.documentElement.scrollWidth")
        allow = page.locator("button[name=allow]").bounding_box()
        stylesheet_applied = page.evaluate(
            "getComputedStyle(document.querySelector('.button--primary')).backgroundColor")
        return scroll_width, allow, stylesheet_applied

    scroll_width, allow, colour = in_browser(look)
    assert scroll_width <= 360
    assert allow["height"] >= 44
    assert colour == "rgb(31, 95, 191)"


def test_signing_in_in_the_browser_needs_the_right_workspace(server, live_people):
    def sign_in_twice(page):
        page.goto(f"{server.url}/accounts/login/?next=/account/apps/")
        sign_in(page, "globex", "bruno", PASSWORD)  # bruno's password, another workspace
        page.wait_for_selector(".alert--error")
        refused = (page.url, page.inner_text(".alert--error"))
        sign_in(page, "acme", "bruno", PASSWORD)
        page.wait_for_url(f"{server.url}/account/apps/")
        page.goto(f"{server.url}/accounts/login/")
        return refused, page.input_value("#id_workspace")

    (url, message), remembered = in_browser(sign_in_twice)
    assert url.startswith(f"{server.url}/accounts/login/")
    assert message == "That workspace, username and password do not match. The password is case-sensitive."
    # The browser remembers the workspace for the next sign-in.
    assert remembered == "acme"
