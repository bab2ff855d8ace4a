"""Sign-in with workspace, login name and password: the right workspace,
throttled failures, safe redirects, password hashing, cookie and HSTS settings."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from django.test import Client

from memoryhub import settings as product_settings
from memoryhub.services.members import member_add
from tests.conftest import PASSWORD

ROOT = Path(__file__).resolve().parents[2]


def sign_in(username: str, password: str, client: Client | None = None, next: str = "/account/apps/",
            workspace: str = "acme", **meta):
    data = {"workspace": workspace, "username": username, "password": password, "next": next}
    return (client or Client()).post("/accounts/login/", data, **meta)


def signed_in_as(response) -> int | None:
    """The id of the user a sign-in response's session is signed in as, if any."""
    user_id = response.wsgi_request.session.get("_auth_user_id")
    return int(user_id) if user_id is not None else None


WRONG = b"That workspace, username and password do not match."
ALERT = '<p class="alert alert--error" role="alert">'


def _message(response) -> str:
    """The sign-in page's alert, whatever was wrong."""
    text = response.content.decode()
    start = text.index(ALERT)
    return text[start:text.index("</p>", start)]


def test_the_sign_in_page_renders(db):
    response = Client().get("/accounts/login/?next=/account/apps/")
    assert response.status_code == 200
    assert b'name="csrfmiddlewaretoken"' in response.content
    assert b'value="/account/apps/"' in response.content
    assert b'name="workspace"' in response.content
    assert response["X-Frame-Options"] == "DENY"


def test_it_signs_in_and_follows_a_local_next(people):
    response = sign_in("bruno", PASSWORD, next="/o/authorize/?client_id=x")
    assert response.status_code == 302
    assert response["Location"] == "/o/authorize/?client_id=x"
    assert signed_in_as(response) == people.bruno.pk
    # The workspace is remembered for the next sign-in on this browser.
    assert response.cookies["memoryhub_workspace"].value == "acme"


def test_the_same_name_in_two_workspaces_signs_into_the_right_one(people):
    globex_bruno = member_add(caller=people.caller(people.olga), username="bruno", password="another long passphrase",
                              roles=["engineering"])
    acme = sign_in("bruno", PASSWORD, workspace="acme")
    assert (acme.status_code, signed_in_as(acme)) == (302, people.bruno.pk)
    globex = sign_in("bruno", "another long passphrase", workspace="globex")
    assert (globex.status_code, signed_in_as(globex)) == (302, globex_bruno.pk)
    # Names are matched case-insensitively, within the workspace named.
    assert signed_in_as(sign_in("BRUNO", "another long passphrase", workspace="Globex")) == globex_bruno.pk


def test_a_wrong_workspace_fails_like_a_wrong_password(people):
    wrong_password = sign_in("bruno", "wrong password")
    assert wrong_password.status_code == 200 and WRONG in wrong_password.content
    for workspace in ("globex", "nowhere", ""):
        # bruno's own password, another workspace (or none: only accounts of no workspace sign in so).
        response = sign_in("bruno", PASSWORD, workspace=workspace)
        assert response.status_code == 200, workspace
        assert signed_in_as(response) is None
        # Nothing tells a wrong workspace from a wrong password (or a name that does not exist).
        expected = f"{ALERT}{WRONG.decode()} The password is case-sensitive."
        assert _message(response) == _message(wrong_password) == expected
        assert _message(sign_in("nobody-here", PASSWORD, workspace=workspace)) == _message(wrong_password)


def test_a_person_of_no_workspace_signs_in_with_the_workspace_left_empty(people):
    response = sign_in("nomad", PASSWORD, workspace="")
    assert (response.status_code, signed_in_as(response)) == (302, people.nomad.pk)
    assert signed_in_as(sign_in("nomad", PASSWORD, workspace="acme")) is None


def test_the_test_clients_login_cannot_sign_a_workspace_person_in(people):
    """Client.login(username=...) finds accounts of no workspace only (what Django's own paths use)."""
    assert Client().login(username="bruno", password=PASSWORD) is False
    assert Client().login(workspace="acme", username="bruno", password=PASSWORD) is True


def test_it_ignores_a_next_to_another_site(people, settings):
    settings.LOGIN_REDIRECT_URL = "/account/apps/"
    response = sign_in("bruno", PASSWORD, next="https://evil.example/")
    assert response["Location"] == "/account/apps/"


@pytest.mark.parametrize("target", ["foo", "my_memory", "connect", "x.y", "\ufffd", "//evil.example/",
                                    "/\\evil.example/", "javascript:alert(1)"])
def test_a_next_that_is_no_path_on_this_site_goes_to_the_default(people, settings, target):
    # "foo" was read as a URL name to reverse: a 500 on every correct sign-in through such a link.
    settings.LOGIN_REDIRECT_URL = "/account/apps/"
    response = sign_in("bruno", PASSWORD, next=target)
    assert (response.status_code, response["Location"]) == (302, "/account/apps/")


def test_a_wrong_password_says_so(people):
    response = sign_in("bruno", "wrong password")
    assert response.status_code == 200
    assert WRONG in response.content
    assert signed_in_as(response) is None


def test_sign_in_needs_csrf(people):
    client = Client(enforce_csrf_checks=True)
    assert sign_in("bruno", PASSWORD, client).status_code == 403


def test_failed_sign_ins_are_throttled_per_username(people):
    for _ in range(5):
        assert sign_in("bruno", "wrong password").status_code == 200
    # Even the right password is not checked once the limit is reached.
    response = sign_in("Bruno", PASSWORD)
    assert response.status_code == 429
    assert int(response["Retry-After"]) > 0
    assert b"Too many failed sign-in attempts" in response.content
    assert "_auth_user_id" not in response.wsgi_request.session
    # Someone else is not locked out by it, nor the same name in another workspace.
    assert sign_in("ada", PASSWORD).status_code == 302
    member_add(caller=people.caller(people.olga), username="bruno", password=PASSWORD)
    assert sign_in("bruno", PASSWORD, workspace="globex").status_code == 302


def test_four_failures_do_not_lock_anyone_out(people):
    for _ in range(4):
        sign_in("bruno", "wrong password")
    assert sign_in("bruno", PASSWORD).status_code == 302


def test_failed_sign_ins_are_throttled_per_address(people):
    for n in range(50):
        assert sign_in(f"guess{n}", "wrong password").status_code == 200
    assert sign_in("ada", PASSWORD).status_code == 429
    assert sign_in("ada", PASSWORD, REMOTE_ADDR="10.0.0.9").status_code == 302


def test_passwords_are_hashed_with_argon2(people, settings):
    settings.PASSWORD_HASHERS = product_settings.PASSWORD_HASHERS
    user = member_add(caller=people.caller(people.ada), username="carla", password=PASSWORD)
    assert user.password.startswith("argon2$")


def _settings_under(env: dict) -> dict:
    code = (
        "import json, memoryhub.settings as s; print(json.dumps({k: getattr(s, k) for k in "
        "['SESSION_COOKIE_SECURE', 'CSRF_COOKIE_SECURE', 'SECURE_HSTS_SECONDS', 'SESSION_COOKIE_HTTPONLY', "
        "'X_FRAME_OPTIONS', 'SECURE_CONTENT_TYPE_NOSNIFF']}))"
    )
    result = subprocess.run([sys.executable, "-c", code], env={**os.environ, **env}, capture_output=True,
                            text=True, cwd=ROOT, check=True)
    return json.loads(result.stdout)


def test_cookies_are_secure_and_hsts_is_on_in_production():
    values = _settings_under({"DEBUG": "False", "MEMORYHUB_BASE_URL": "https://memory.example.com",
                              "SECRET_KEY": "x" * 50})
    assert values["SESSION_COOKIE_SECURE"] is True
    assert values["CSRF_COOKIE_SECURE"] is True
    assert values["SECURE_HSTS_SECONDS"] >= 31536000
    assert values["SESSION_COOKIE_HTTPONLY"] is True
    assert values["X_FRAME_OPTIONS"] == "DENY"


@pytest.mark.parametrize("env", [{"DEBUG": "True", "MEMORYHUB_BASE_URL": "https://memory.example.com"},
                                 {"DEBUG": "False", "MEMORYHUB_BASE_URL": "http://127.0.0.1:8000"}])
def test_hsts_stays_off_in_development(env):
    values = _settings_under({**env, "SECRET_KEY": "x" * 50})
    assert values["SECURE_HSTS_SECONDS"] == 0
    assert values["SESSION_COOKIE_SECURE"] is False
