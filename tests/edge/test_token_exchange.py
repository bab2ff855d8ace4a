"""The RFC 8693 endpoint's request rules, in this process (Django's test client)."""

from __future__ import annotations

from datetime import timedelta

import pytest
from django.test import Client
from django.utils import timezone
from oauth2_provider.models import Application

from tests.conftest import People
from tests.oauth.conftest import set_public_origin

from .conftest import person_token, planted_credential, stored

ORIGIN = "http://testserver"
AUDIENCE = f"{ORIGIN}/internal/memory"
GRANT = "urn:ietf:params:oauth:grant-type:token-exchange"
ACCESS_TOKEN = "urn:ietf:params:oauth:token-type:access_token"


@pytest.fixture(autouse=True)
def edge_on(settings):
    set_public_origin(settings, ORIGIN)
    settings.MEMORYHUB_INTERNAL_API = True
    settings.MEMORYHUB_SERVICE_AUDIENCE = ""
    settings.MEMORYHUB_EXCHANGED_TOKEN_SECONDS = 25.0
    return settings


@pytest.fixture
def token(live_people: People, notes_app: Application) -> str:
    return person_token(notes_app, live_people.bruno, resource=f"{ORIGIN}/mcp")


def post(data: dict, **headers) -> dict:
    answer = Client().post("/o/token/exchange/", data, **headers)
    return {"status": answer.status_code, "cache": answer.get("Cache-Control", ""), **answer.json()}


def request(token: str, **overrides) -> dict:
    data = {"grant_type": GRANT, "subject_token": token, "subject_token_type": ACCESS_TOKEN,
            "resource": f"{ORIGIN}/mcp", "audience": AUDIENCE, **overrides}
    return {key: value for key, value in data.items() if value is not None}


def test_it_issues_a_credential_naming_the_caller(
    token: str, live_people: People, notes_app: Application
) -> None:
    answer = post(request(token))
    assert answer["status"] == 200
    assert "no-store" in answer["cache"]
    assert answer["issued_token_type"] == ACCESS_TOKEN and answer["token_type"] == "Bearer"
    assert (answer["tenant"], answer["subject"], answer["principal_kind"]) == (
        str(live_people.bruno.tenant_id), "user:bruno", "user"
    )
    assert answer["scope"] == "memory.audit memory.read memory.write"
    assert (answer["audience"], answer["resource"]) == (AUDIENCE, f"{ORIGIN}/mcp")
    assert answer["client_id"] == notes_app.client_id
    assert answer["access_token"] != token and len(answer["access_token"]) >= 43
    assert 0 < answer["expires_in"] <= 25


@pytest.mark.parametrize(
    ("overrides", "error"),
    [
        ({"grant_type": "client_credentials"}, "unsupported_grant_type"),
        ({"subject_token": None}, "invalid_request"),
        ({"subject_token_type": "urn:ietf:params:oauth:token-type:id_token"}, "invalid_request"),
        ({"requested_token_type": "urn:ietf:params:oauth:token-type:refresh_token"}, "invalid_request"),
        ({"resource": None}, "invalid_request"),
        ({"audience": None}, "invalid_request"),
        ({"actor_token": "someone-else"}, "invalid_request"),
        ({"audience": "http://testserver/mcp"}, "invalid_target"),
        ({"resource": "http://testserver/internal/memory"}, "invalid_target"),
        ({"subject_token": "forged"}, "invalid_grant"),
        ({"scope": "memory.read ingest"}, "invalid_scope"),
    ],
)
def test_it_refuses_what_rfc_8693_and_our_policy_refuse(token: str, overrides: dict, error: str) -> None:
    answer = post(request(token, **overrides))
    assert (answer["status"], answer["error"]) == (400, error), answer


def test_a_repeated_parameter_is_refused(token: str) -> None:
    data = request(token)
    data["audience"] = [AUDIENCE, "https://other.example.com"]
    assert post(data)["error"] == "invalid_request"


def test_client_authentication_is_refused_not_ignored(token: str) -> None:
    answer = post(request(token), HTTP_AUTHORIZATION="Basic ZWRnZTpzZWNyZXQ=")
    assert (answer["status"], answer["error"]) == (401, "invalid_client")


def test_an_expired_subject_token_is_refused(token: str) -> None:
    row = stored(token)
    row.expires = timezone.now() - timedelta(seconds=1)
    row.save(update_fields=["expires"])
    assert post(request(token))["error"] == "invalid_grant"


def test_the_credential_never_outlives_the_subject_token(token: str) -> None:
    row = stored(token)
    row.expires = timezone.now() + timedelta(seconds=5)
    row.save(update_fields=["expires"])
    answer = post(request(token))
    assert answer["expires_in"] <= 5
    assert stored(answer["access_token"]).expires <= row.expires


def test_the_lifetime_setting_is_capped_at_the_call_deadline(token: str, settings) -> None:
    settings.MEMORYHUB_EXCHANGED_TOKEN_SECONDS = 3600
    answer = post(request(token))
    credential = stored(answer["access_token"])
    assert answer["expires_in"] <= 25
    assert credential.expires - credential.created <= timedelta(seconds=25)


def test_a_read_only_token_gives_a_credential_that_cannot_write(live_people: People, notes_app: Application) -> None:
    token = person_token(notes_app, live_people.ada, resource=f"{ORIGIN}/mcp/readonly")
    answer = post(request(token, resource=f"{ORIGIN}/mcp/readonly"))
    assert answer["scope"] == "memory.audit memory.read"
    only_write = post(request(token, resource=f"{ORIGIN}/mcp/readonly", scope="memory.write"))
    assert only_write["error"] == "invalid_scope"


def test_tokens_that_open_no_mcp_resource_are_not_exchanged(token: str) -> None:
    ingest_like = planted_credential(like=token, resource=[], seconds=600, scope="ingest")
    assert post(request(ingest_like))["error"] == "invalid_grant"


def test_expired_credentials_are_cleared_as_the_principal_exchanges(token: str, monkeypatch) -> None:
    from memoryhub.oauth import exchange

    monkeypatch.setattr(exchange, "PURGE_EVERY", 1)
    first = post(request(token))["access_token"]
    row = stored(first)
    row.expires = timezone.now() - timedelta(seconds=1)
    row.save(update_fields=["expires"])
    post(request(token))
    with pytest.raises(row.DoesNotExist):
        stored(first)
    # The caller's own token is untouched.
    assert stored(token)


def test_exchanges_per_token_are_bounded_at_twice_the_mcp_rate(token: str, settings) -> None:
    """Twice what the gateway serves one principal in a minute: a full burst plus a minute's refill."""
    from oauth2_provider.models import AccessToken

    settings.MEMORYHUB_RATE_PER_MINUTE, settings.MEMORYHUB_RATE_BURST = 1, 2
    assert [post(request(token))["status"] for _ in range(6)] == [200] * 6
    rows = AccessToken.objects.count()
    answer = Client().post("/o/token/exchange/", request(token))
    assert answer.status_code == 429 and int(answer["Retry-After"]) >= 1
    assert answer.json()["error"] == "rate_limited"
    # Refused before any database work: no credential was written.
    assert AccessToken.objects.count() == rows


def test_it_is_off_in_a_single_process_deployment(token: str, settings) -> None:
    settings.MEMORYHUB_INTERNAL_API = False
    assert post(request(token))["error"] == "unsupported_grant_type"
    answer = Client().post("/internal/memory/probe", {}, content_type="application/json",
                           HTTP_AUTHORIZATION=f"Bearer {token}")
    assert answer.status_code == 404


def test_only_post_is_accepted(token: str) -> None:
    assert Client().get("/o/token/exchange/").status_code == 405
    assert Client().get("/internal/memory/probe").status_code == 405
