"""The connected apps page and Disconnect."""

from __future__ import annotations

from urllib.parse import urlsplit

import pytest
from django.test import Client

from memoryhub.errors import PermissionDenied
from memoryhub.oauth.tokens import token_verified
from memoryhub.services.connected_apps import connected_app_disconnect, connected_apps_list
from tests.conftest import signed_in
from tests.oauth.conftest import REDIRECT_URI, TEST_ORIGIN, authorization_code, exchange_code, refresh


def connect(user, application) -> dict:
    code, verifier = authorization_code(user, application)
    return exchange_code(application, code, verifier)


def test_it_lists_the_apps_a_person_authorised(people, mcp_client):
    connect(people.bruno, mcp_client)
    page = signed_in(people.bruno).get("/account/apps/")
    assert page.status_code == 200
    text = page.content.decode()
    assert "Notes app" in text
    assert "memory.read, memory.write" in text
    assert ">Disconnect<" in text
    assert "keeps working until it expires, at most 15 minutes" in text


def test_it_shows_only_the_persons_own_apps(people, mcp_client):
    connect(people.bruno, mcp_client)
    assert "Notes app" not in signed_in(people.ada).get("/account/apps/").content.decode()


def test_it_needs_a_signed_in_person(db):
    response = Client().get("/account/apps/")
    assert response.status_code == 302
    assert response["Location"].startswith("/accounts/login/")


def test_disconnect_ends_the_refresh_chain_at_once(people, mcp_client):
    tokens = connect(people.bruno, mcp_client)
    client = signed_in(people.bruno)
    response = client.post(f"/account/apps/{mcp_client.pk}/disconnect/", follow=True)
    assert "an access token it already holds keeps working until it expires" in response.content.decode()
    assert refresh(mcp_client, tokens["refresh_token"])["error"] == "invalid_grant"


def test_the_access_token_already_issued_runs_out_its_time(people, mcp_client):
    tokens = connect(people.bruno, mcp_client)
    signed_in(people.bruno).post(f"/account/apps/{mcp_client.pk}/disconnect/")
    # Exactly what the page promises: no sub-lifetime kill switch.
    assert token_verified(tokens["access_token"], resource=f"{TEST_ORIGIN}/mcp") is not None
    page = signed_in(people.bruno).get("/account/apps/").content.decode()
    assert "Disconnected" in page
    assert ">Disconnect<" not in page


def test_someone_else_cannot_disconnect_a_persons_app(people, mcp_client):
    tokens = connect(people.bruno, mcp_client)
    signed_in(people.ada).post(f"/account/apps/{mcp_client.pk}/disconnect/")
    assert refresh(mcp_client, tokens["refresh_token"])["status"] == 200


def test_disconnect_is_a_csrf_protected_post(people, mcp_client):
    connect(people.bruno, mcp_client)
    assert signed_in(people.bruno).get(f"/account/apps/{mcp_client.pk}/disconnect/").status_code == 405
    client = Client(enforce_csrf_checks=True)
    client.force_login(people.bruno)
    assert client.post(f"/account/apps/{mcp_client.pk}/disconnect/").status_code == 403


def test_a_registration_is_not_a_connection(people):
    client = signed_in(people.bruno)
    client.post("/o/register/", {"client_name": "Registered only", "redirect_uris": ["http://127.0.0.1:9/cb"]},
                content_type="application/json")
    assert "Registered only" not in client.get("/account/apps/").content.decode()


def test_the_service_lists_and_disconnects_for_the_person_asking_only(people, mcp_client):
    """Caller-first: the person is the caller, never an argument."""
    tokens = connect(people.bruno, mcp_client)
    [app] = connected_apps_list(caller=people.caller(people.bruno))
    assert (app.application, app.scopes, app.connected) == (mcp_client, ["memory.read", "memory.write"], True)
    assert connected_apps_list(caller=people.caller(people.ada)) == []
    # Someone else's disconnect ends nothing of bruno's.
    assert connected_app_disconnect(caller=people.caller(people.ada), application_id=mcp_client.pk) is False
    assert refresh(mcp_client, tokens["refresh_token"])["status"] == 200


@pytest.mark.parametrize("who", ["agent", "system"])
def test_connected_apps_are_a_persons_only(people, mcp_client, who):
    connect(people.bruno, mcp_client)
    caller = people.caller(people.triage_bot) if who == "agent" else people.system()
    with pytest.raises(PermissionDenied):
        connected_apps_list(caller=caller)
    with pytest.raises(PermissionDenied):
        connected_app_disconnect(caller=caller, application_id=mcp_client.pk)
    assert [app.connected for app in connected_apps_list(caller=people.caller(people.bruno))] == [True]


def test_it_shows_when_and_where_each_app_was_connected_and_last_used(people, mcp_client):
    import datetime as dt

    from django.utils import timezone
    from oauth2_provider.models import AccessToken

    tokens = connect(people.bruno, mcp_client)
    app = connected_apps_list(caller=people.caller(people.bruno))[0]
    assert app.connected_on is not None and app.last_used is not None
    assert app.redirect_hosts == [urlsplit(REDIRECT_URI).netloc]
    page = signed_in(people.bruno).get("/account/apps/").content.decode()
    assert "Connected " in page and "last used " in page and f"returns to <strong><bdi>{app.redirect_hosts[0]}" in page
    # Using the token at /mcp moves "last used" forward (to the minute).
    long_ago = timezone.now() - dt.timedelta(hours=2)
    AccessToken.objects.filter(user=people.bruno).update(updated=long_ago)
    assert connected_apps_list(caller=people.caller(people.bruno))[0].last_used == long_ago
    assert token_verified(tokens["access_token"], resource=f"{TEST_ORIGIN}/mcp") is not None
    assert connected_apps_list(caller=people.caller(people.bruno))[0].last_used > long_ago


def test_an_apps_name_and_return_host_show_their_hidden_characters(people, mcp_client):
    mcp_client.name = "Notes \u202eppa"
    mcp_client.save()
    connect(people.bruno, mcp_client)
    host = "127.0.0.1:8765"
    mcp_client.redirect_uris = f"http://{host}/callback http://\u2067evil\u2069.test/cb"
    mcp_client.save()
    page = signed_in(people.bruno).get("/account/apps/").content.decode()
    assert "[U+202E]" in page and "[U+2067]" in page
    assert not any(char in page for char in "\u202e\u2067\u2069")


def test_its_scopes_outlive_the_access_token_while_it_can_refresh(people, mcp_client):
    import datetime as dt

    from django.utils import timezone
    from oauth2_provider.models import AccessToken

    connect(people.bruno, mcp_client)
    AccessToken.objects.filter(user=people.bruno).update(expires=timezone.now() - dt.timedelta(minutes=1))
    app = connected_apps_list(caller=people.caller(people.bruno))[0]
    assert app.connected and app.scopes == ["memory.read", "memory.write"]
    assert "Can: memory.read, memory.write" in signed_in(people.bruno).get("/account/apps/").content.decode()


def test_disconnect_all(people, mcp_client):
    from oauth2_provider.models import Application

    other = Application.objects.create(
        name="Second app", client_type=Application.CLIENT_PUBLIC, client_secret="", hash_client_secret=False,
        authorization_grant_type=Application.GRANT_AUTHORIZATION_CODE, redirect_uris=mcp_client.redirect_uris)
    first, second = connect(people.bruno, mcp_client), connect(people.bruno, other)
    connect(people.ada, mcp_client)
    page = signed_in(people.bruno).get("/account/apps/").content.decode()
    assert 'id="disconnect-all"' in page
    response = signed_in(people.bruno).post("/account/apps/disconnect-all/", follow=True)
    assert "Disconnected 2 apps." in response.content.decode()
    assert refresh(mcp_client, first["refresh_token"])["error"] == "invalid_grant"
    assert refresh(other, second["refresh_token"])["error"] == "invalid_grant"
    assert all(app.connected for app in connected_apps_list(caller=people.caller(people.ada)))
    assert Client().post("/account/apps/disconnect-all/").status_code == 302  # sign in first


def test_an_edge_deployments_exchanged_credentials_do_not_narrow_the_grant_shown(people, mcp_client):
    import datetime as dt
    import secrets

    from django.utils import timezone
    from oauth2_provider.models import AccessToken

    connect(people.bruno, mcp_client)
    AccessToken.objects.create(application=mcp_client, user=people.bruno, scope="memory.read",
                               token=secrets.token_urlsafe(24), resource=["http://127.0.0.1:1/internal/memory"],
                               expires=timezone.now() + dt.timedelta(seconds=25))
    assert connected_apps_list(caller=people.caller(people.bruno))[0].scopes == ["memory.read", "memory.write"]
