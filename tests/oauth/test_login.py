"""Sign-in: throttled failures, safe redirects, password hashing, cookie and HSTS settings."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from django.test import Client

from memoryhub import settings as product_settings
from memoryhub.services.workspaces import person_add
from tests.oauth.conftest import PASSWORD

ROOT = Path(__file__).resolve().parents[2]


def sign_in(username: str, password: str, client: Client | None = None, next: str = "/account/apps/", **meta):
    data = {"username": username, "password": password, "next": next}
    return (client or Client()).post("/accounts/login/", data, **meta)


def test_the_sign_in_page_renders(db):
    response = Client().get("/accounts/login/?next=/account/apps/")
    assert response.status_code == 200
    assert b'name="csrfmiddlewaretoken"' in response.content
    assert b'value="/account/apps/"' in response.content
    assert response["X-Frame-Options"] == "DENY"


def test_it_signs_in_and_follows_a_local_next(people):
    response = sign_in("bruno", PASSWORD, next="/o/authorize/?client_id=x")
    assert response.status_code == 302
    assert response["Location"] == "/o/authorize/?client_id=x"


def test_it_ignores_a_next_to_another_site(people, settings):
    settings.LOGIN_REDIRECT_URL = "/account/apps/"
    response = sign_in("bruno", PASSWORD, next="https://evil.example/")
    assert response["Location"] == "/account/apps/"


def test_a_wrong_password_says_so(people):
    response = sign_in("bruno", "wrong password")
    assert response.status_code == 200
    assert b"do not match" in response.content
    assert "_auth_user_id" not in Client().session


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
    # Someone else is not locked out by it.
    assert sign_in("ada", PASSWORD).status_code == 302


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
    user = person_add(tenant=people.ada.tenant, username="carla", password=PASSWORD)
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
