"""The authorization endpoint and its consent page."""

from __future__ import annotations

from django.test import Client

from tests.conftest import signed_in
from tests.oauth.conftest import (
    REDIRECT_URI,
    TEST_ORIGIN,
    authorization_code,
    authorize_url,
    consent,
    exchange_code,
    pkce_pair,
    redirect_query,
)


def test_it_sends_people_to_sign_in_first(people, mcp_client):
    _, challenge = pkce_pair()
    response = Client().get(authorize_url(mcp_client, challenge))
    assert response.status_code == 302
    assert response["Location"].startswith("/accounts/login/?next=/o/authorize/")


def test_the_consent_page_names_client_workspace_and_scopes_in_plain_words(people, mcp_client):
    _, challenge = pkce_pair()
    page = signed_in(people.bruno).get(authorize_url(mcp_client, challenge))
    assert page.status_code == 200
    text = page.content.decode()
    assert "Notes app" in text
    assert "Acme Inc." in text
    assert "Search the memory you can see in Acme Inc." in text
    assert "Save facts from your conversations as your private memory" in text
    assert "Reopen your own search receipts" not in text
    assert "127.0.0.1:8765" in text
    assert 'name="allow"' in text and ">Deny<" in text


def test_the_consent_page_says_what_the_admin_scope_allows(people, mcp_client):
    _, challenge = pkce_pair()
    page = signed_in(people.ada).get(authorize_url(mcp_client, challenge, scope="workspace.admin",
                                                   resource=f"{TEST_ORIGIN}/api/admin"))
    assert page.status_code == 200
    text = page.content.decode()
    assert "wants to administer your workspace" in text
    assert ("Administer Acme Inc. as you, through its REST admin API: its members, roles, collections, access "
            "rules, connected sources and agents, for as long as you are one of its admins.") in text
    assert "It cannot search or save memory." in text
    assert "(workspace.admin)" in text
    assert "The REST admin API: workspace administration, no memory" in text
    assert "Search the memory you can see" not in text


def test_a_client_name_that_would_display_as_another_is_shown_marked(people, mcp_client):
    """A registered name with a right-to-left override ("Notes \u202eppa" displays
    as "Notes app") is shown on the consent page and the tab title with the
    override marked, never raw."""
    mcp_client.name = "Claude \u202eppa\u202c"
    mcp_client.save()
    _, challenge = pkce_pair()
    text = signed_in(people.bruno).get(authorize_url(mcp_client, challenge)).content.decode()
    assert "\u202e" not in text and "\u202c" not in text
    assert '<span class="client-name"><bdi>Claude <span class="hidden-char"' in text
    assert "<title>Connect Claude [U+202E]ppa[U+202C]" in text


def test_the_consent_page_cannot_be_framed(people, mcp_client):
    _, challenge = pkce_pair()
    page = signed_in(people.bruno).get(authorize_url(mcp_client, challenge))
    assert page["X-Frame-Options"] == "DENY"
    policy = page["Content-Security-Policy"]
    assert "frame-ancestors 'none'" in policy
    # The browser must be allowed to follow the consent form's redirect to the client.
    assert "form-action 'self' http://127.0.0.1:8765" in policy


def test_the_consent_form_is_csrf_protected(people, mcp_client):
    _, challenge = pkce_pair()
    client = Client(enforce_csrf_checks=True)
    client.force_login(people.bruno)
    page = client.get(authorize_url(mcp_client, challenge))
    data = {key: value for key, value in page.context["form"].initial.items() if value is not None}
    response = client.post(authorize_url(mcp_client, challenge), {**data, "allow": "1"})
    assert response.status_code == 403


def test_allow_returns_a_code_with_state_and_issuer(people, mcp_client):
    _, challenge = pkce_pair()
    params = redirect_query(consent(signed_in(people.bruno), mcp_client, challenge))
    assert params["code"]
    assert params["state"] == "st-123"
    assert params["iss"] == TEST_ORIGIN


def test_deny_returns_access_denied_with_issuer(people, mcp_client):
    _, challenge = pkce_pair()
    params = redirect_query(consent(signed_in(people.bruno), mcp_client, challenge, allow=False))
    assert params["error"] == "access_denied"
    assert params["iss"] == TEST_ORIGIN
    assert "code" not in params


def test_it_refuses_a_request_without_pkce(people, mcp_client):
    response = signed_in(people.bruno).get(authorize_url(mcp_client, "", code_challenge=None,
                                                        code_challenge_method=None))
    params = redirect_query(response)
    assert params["error"] == "invalid_request"
    assert "challenge" in params["error_description"].lower()


def test_it_refuses_plain_pkce(people, mcp_client):
    verifier, _ = pkce_pair()
    response = signed_in(people.bruno).get(authorize_url(mcp_client, verifier, code_challenge_method="plain"))
    params = redirect_query(response)
    assert params["error"] == "invalid_request"
    assert "S256" in params["error_description"]


def test_it_refuses_a_challenge_without_a_method(people, mcp_client):
    # oauthlib would read a missing method as "plain".
    _, challenge = pkce_pair()
    response = signed_in(people.bruno).get(authorize_url(mcp_client, challenge, code_challenge_method=None))
    assert redirect_query(response)["error"] == "invalid_request"


def test_it_refuses_a_resource_that_is_not_ours(people, mcp_client):
    _, challenge = pkce_pair()
    response = signed_in(people.bruno).get(authorize_url(mcp_client, challenge,
                                                        resource="https://elsewhere.example/mcp"))
    assert redirect_query(response)["error"] == "invalid_target"


def test_it_refuses_two_resources_at_once(people, mcp_client):
    _, challenge = pkce_pair()
    url = authorize_url(mcp_client, challenge) + f"&resource={TEST_ORIGIN}/mcp/readonly"
    response = signed_in(people.bruno).get(url)
    assert redirect_query(response)["error"] == "invalid_target"


def test_it_refuses_a_tampered_resource_on_the_consent_form(people, mcp_client):
    _, challenge = pkce_pair()
    client = signed_in(people.bruno)
    url = authorize_url(mcp_client, challenge)
    page = client.get(url)
    data = {key: value for key, value in page.context["form"].initial.items() if value is not None}
    data.update(resource="https://elsewhere.example/mcp", allow="1")
    assert redirect_query(client.post(url, data))["error"] == "invalid_target"


def test_it_refuses_a_scope_beyond_the_clients_grant(people, mcp_client):
    _, challenge = pkce_pair()
    response = signed_in(people.bruno).get(authorize_url(mcp_client, challenge, scope="memory.read ingest"))
    assert redirect_query(response)["error"] == "invalid_scope"


def test_it_never_redirects_to_an_unregistered_uri(people, mcp_client):
    _, challenge = pkce_pair()
    for uri in ("https://evil.example/callback", "http://127.0.0.1:9999/callback", REDIRECT_URI + "/x"):
        response = signed_in(people.bruno).get(authorize_url(mcp_client, challenge, redirect_uri=uri))
        assert response.status_code == 400, uri
        assert b"invalid_request" in response.content
        assert "Location" not in response


def test_it_refuses_an_unknown_client_without_redirecting(people, mcp_client):
    _, challenge = pkce_pair()
    mcp_client.client_id = "nobody"
    response = signed_in(people.bruno).get(authorize_url(mcp_client, challenge))
    assert response.status_code == 400
    assert "Location" not in response


def test_agents_cannot_be_authorised_by_people(people):
    bot = people.triage_bot
    _, challenge = pkce_pair()
    response = signed_in(people.bruno).get(
        f"/o/authorize/?response_type=code&client_id={bot.client_id}&code_challenge={challenge}"
        "&code_challenge_method=S256&scope=memory.read"
    )
    # An agent's client has no redirect URI to send an error to.
    assert response.status_code == 400


def test_a_person_outside_any_workspace_cannot_authorise(people, mcp_client):
    _, challenge = pkce_pair()
    client = signed_in(people.nomad)
    url = authorize_url(mcp_client, challenge)
    assert client.get(url).status_code == 403
    assert client.post(url, {"allow": "1"}).status_code == 403


def test_it_refuses_an_empty_or_malformed_challenge(people, mcp_client):
    for challenge in ("", "short", "x" * 42 + "!"):
        response = signed_in(people.bruno).get(authorize_url(mcp_client, challenge))
        assert redirect_query(response)["error"] == "invalid_request", challenge


def test_a_client_cannot_skip_consent(people, mcp_client):
    # DOT would skip the page for a client already holding a live token.
    _, challenge = pkce_pair()
    client = signed_in(people.bruno)
    code, verifier = authorization_code(people.bruno, mcp_client)
    exchange_code(mcp_client, code, verifier)
    response = client.get(authorize_url(mcp_client, challenge) + "&approval_prompt=auto")
    assert response.status_code == 200
    assert b"wants to use your memory" in response.content
