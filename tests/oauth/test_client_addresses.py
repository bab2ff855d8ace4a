"""Per-address limits: how many they allow is configuration, and which address a
request comes from is the connecting one unless a configured proxy forwarded it.

Over real HTTP against the product's ASGI application under the server options every
memoryhub process runs with (mcpapi.serving): uvicorn on its own believes
X-Forwarded-For from 127.0.0.1, so without MEMORYHUB_TRUSTED_PROXIES a local client
could pick a fresh address for every request and never meet a per-address limit.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import httpx2
import pytest
from django.core.exceptions import ImproperlyConfigured
from django.test import Client

from memoryhub.settings import envrate

ROOT = Path(__file__).resolve().parents[2]
LOOPBACK = "http://127.0.0.1:7000/callback"
DOCUMENT = json.dumps({"redirect_uris": [LOOPBACK]})


def _register(server_url: str, forwarded: str | None = None) -> int:
    headers = {"Content-Type": "application/json"}
    if forwarded is not None:
        headers["X-Forwarded-For"] = forwarded
    return httpx2.post(f"{server_url}/o/register/", content=DOCUMENT, headers=headers, timeout=30,
                      trust_env=False).status_code


@pytest.mark.django_db
def test_the_registration_limit_is_a_setting(settings):
    settings.MEMORYHUB_REGISTRATIONS_PER_ADDRESS = "3/h"
    client = Client(REMOTE_ADDR="192.0.2.10")
    statuses = [client.post("/o/register/", DOCUMENT, content_type="application/json").status_code
                for _ in range(4)]
    assert statuses == [201, 201, 201, 429]
    # Another address has its own allowance.
    other = Client(REMOTE_ADDR="192.0.2.11").post("/o/register/", DOCUMENT, content_type="application/json")
    assert other.status_code == 201


@pytest.mark.django_db
def test_the_sign_in_failure_limit_per_address_is_a_setting(settings, people):
    settings.MEMORYHUB_SIGNIN_FAILURES_PER_ADDRESS = "2/15m"
    client = Client(REMOTE_ADDR="192.0.2.20")

    def sign_in(username: str, password: str) -> int:
        return client.post("/accounts/login/", {"workspace": "acme", "username": username,
                                                 "password": password}).status_code

    assert [sign_in("nobody1", "wrong"), sign_in("nobody2", "wrong")] == [200, 200]
    assert sign_in("ada", "wrong") == 429


@pytest.mark.parametrize("value", ["1/s", "30/h", "50/15m", "999999999/d", "7/999999m", " 30/h "])
def test_a_rate_is_a_count_and_a_period(monkeypatch, value):
    monkeypatch.setenv("MEMORYHUB_REGISTRATIONS_PER_ADDRESS", value)
    assert envrate("MEMORYHUB_REGISTRATIONS_PER_ADDRESS", "30/h") == value.strip()


@pytest.mark.parametrize("value", ["30", "0/h", "30/x", "30/0m", "1000000000/d", "7/1000000m", "-1/h",
                                   "30/h;", "thirty/h", "30 / h", "30/h\u00e9", "\ud800"])
def test_anything_else_stops_the_start(monkeypatch, value):
    monkeypatch.setattr("os.environ", {"MEMORYHUB_REGISTRATIONS_PER_ADDRESS": value})
    with pytest.raises(ImproperlyConfigured, match="MEMORYHUB_REGISTRATIONS_PER_ADDRESS.*30/h or 50/15m"):
        envrate("MEMORYHUB_REGISTRATIONS_PER_ADDRESS", "30/h")


def test_a_process_with_a_wrong_rate_does_not_start():
    env = {"PATH": "/usr/bin:/bin", "MEMORYHUB_SIGNIN_FAILURES_PER_ADDRESS": "50 per minute",
           "DJANGO_SETTINGS_MODULE": "memoryhub.settings", "HOME": "/tmp"}
    result = subprocess.run([sys.executable, "-c", "import django; django.setup()"], cwd=ROOT, env=env,
                            capture_output=True, text=True, timeout=120)
    assert result.returncode != 0
    assert "MEMORYHUB_SIGNIN_FAILURES_PER_ADDRESS='50 per minute' is not a rate" in result.stderr


@pytest.fixture
def server_trusting(request, monkeypatch, settings):
    """The live server, started with MEMORYHUB_TRUSTED_PROXIES set to the test's parameter."""
    monkeypatch.setenv("MEMORYHUB_TRUSTED_PROXIES", request.param)
    settings.MEMORYHUB_REGISTRATIONS_PER_ADDRESS = "2/h"
    return request.getfixturevalue("asgi_server")


@pytest.mark.parametrize("server_trusting", [""], indirect=True)
def test_without_trusted_proxies_a_client_cannot_choose_its_address(server_trusting):
    statuses = [_register(server_trusting.url, forwarded=f"203.0.113.{n}") for n in range(1, 4)]
    assert statuses == [201, 201, 429]
    assert _register(server_trusting.url) == 429


@pytest.mark.parametrize("server_trusting", ["127.0.0.1"], indirect=True)
def test_a_trusted_proxy_forwards_the_client_address(server_trusting):
    url = server_trusting.url
    assert [_register(url, "203.0.113.1"), _register(url, "203.0.113.1"), _register(url, "203.0.113.1")] == [
        201, 201, 429]
    # Another client behind the proxy has its own allowance ...
    assert _register(url, "203.0.113.2") == 201
    # ... and a client cannot escape by putting an address of its choice before the one
    # the proxy appended: the nearest address the proxy did not vouch for counts.
    assert _register(url, "198.51.100.7, 203.0.113.1") == 429
