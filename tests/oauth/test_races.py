"""Concurrent and replayed uses of one authorization code or one refresh
token, sent truly in parallel to a running server.

Before: 8 parallel refreshes with one refresh token gave 1×200 and 7×500 and
revoked nothing, while one replay done sequentially revokes the family; 8
parallel redemptions of one code sometimes gave a 500; a replayed code was
refused but the token issued from it kept working. Now exactly one request
wins, every other gets 400 invalid_grant, and reuse, concurrent or not,
revokes what the code or the token family issued (RFC 6749 §4.1.2, RFC 9700).
"""

from __future__ import annotations

import threading
from concurrent.futures import ThreadPoolExecutor

import httpx2
import pytest
from oauth2_provider.models import AccessToken, Application

from memoryhub.oauth.tokens import token_checksum
from tests.mcpapi.rpc_http import call_tool, tool_result
from tests.oauth.conftest import REDIRECT_URI, authorization_code

PARALLEL = 8


@pytest.fixture
def client_app(live_people) -> Application:
    return Application.objects.create(
        name="Notes app", client_type=Application.CLIENT_PUBLIC,
        authorization_grant_type=Application.GRANT_AUTHORIZATION_CODE, redirect_uris=REDIRECT_URI,
        registration_source=Application.RegistrationSource.DCR, client_secret="", hash_client_secret=False,
    )


def code_for(people, application: Application, base_url: str) -> tuple[str, str]:
    return authorization_code(people.bruno, application, resource=f"{base_url}/mcp")


def post_token(base_url: str, data: dict) -> httpx2.Response:
    return httpx2.post(f"{base_url}/o/token/", data=data, timeout=60, trust_env=False)


def all_at_once(base_url: str, data: dict) -> list[httpx2.Response]:
    """PARALLEL identical token requests released together."""
    barrier = threading.Barrier(PARALLEL)

    def one() -> httpx2.Response:
        barrier.wait()
        return post_token(base_url, data)

    with ThreadPoolExecutor(PARALLEL) as pool:
        return list(pool.map(lambda _: one(), range(PARALLEL)))


def redeem(base_url: str, application: Application, code: str, verifier: str) -> dict:
    return {"grant_type": "authorization_code", "code": code, "redirect_uri": REDIRECT_URI,
            "client_id": application.client_id, "code_verifier": verifier}


def refresh_with(application: Application, refresh_token: str) -> dict:
    return {"grant_type": "refresh_token", "refresh_token": refresh_token, "client_id": application.client_id}


def works_at_mcp(base_url: str, access_token: str) -> bool:
    """whoami with this token: True when served, False when refused as invalid (never anything else)."""
    response = call_tool(f"{base_url}/mcp", access_token, "whoami", {})
    assert response.status_code in (200, 401), response.text
    if response.status_code == 200:
        assert tool_result(response)["structuredContent"]["subject"] == "user:bruno"
    return response.status_code == 200


def outcomes(responses: list[httpx2.Response]) -> list[tuple[int, str]]:
    return sorted((r.status_code, r.json().get("error", "")) for r in responses)


def test_parallel_refreshes_with_one_token_one_wins_and_the_reuse_revokes_the_family(
        live_people, client_app, asgi_server):
    base = asgi_server.url
    code, verifier = code_for(live_people, client_app, base)
    first = post_token(base, redeem(base, client_app, code, verifier))
    assert first.status_code == 200, first.text
    tokens = first.json()

    responses = all_at_once(base, refresh_with(client_app, tokens["refresh_token"]))

    assert outcomes(responses) == [(200, "")] + [(400, "invalid_grant")] * (PARALLEL - 1)
    winner = next(r.json() for r in responses if r.status_code == 200)
    # The others were replays of a rotated token: the family is revoked, as after a sequential replay.
    assert post_token(base, refresh_with(client_app, winner["refresh_token"])).json()["error"] == "invalid_grant"
    assert not AccessToken.objects.filter(token_checksum=token_checksum(winner["access_token"])).exists()
    assert not works_at_mcp(base, winner["access_token"])


def test_a_sequential_refresh_replay_revokes_the_family_too(live_people, client_app, asgi_server):
    base = asgi_server.url
    code, verifier = code_for(live_people, client_app, base)
    tokens = post_token(base, redeem(base, client_app, code, verifier)).json()
    rotated = post_token(base, refresh_with(client_app, tokens["refresh_token"]))
    assert rotated.status_code == 200
    replay = post_token(base, refresh_with(client_app, tokens["refresh_token"]))
    assert (replay.status_code, replay.json()["error"]) == (400, "invalid_grant")
    assert not works_at_mcp(base, rotated.json()["access_token"])


def test_parallel_redemptions_of_one_code_one_wins_the_rest_are_invalid_grant(live_people, client_app, asgi_server):
    base = asgi_server.url
    code, verifier = code_for(live_people, client_app, base)

    responses = all_at_once(base, redeem(base, client_app, code, verifier))

    assert outcomes(responses) == [(200, "")] + [(400, "invalid_grant")] * (PARALLEL - 1)
    winner = next(r.json() for r in responses if r.status_code == 200)
    # The other redemptions were replays of a used code: what it issued is revoked.
    assert not works_at_mcp(base, winner["access_token"])
    assert post_token(base, refresh_with(client_app, winner["refresh_token"])).json()["error"] == "invalid_grant"


def test_a_replayed_code_revokes_the_tokens_issued_from_it(live_people, client_app, asgi_server):
    base = asgi_server.url
    code, verifier = code_for(live_people, client_app, base)
    issued = post_token(base, redeem(base, client_app, code, verifier))
    assert issued.status_code == 200
    tokens = issued.json()
    assert works_at_mcp(base, tokens["access_token"])

    replay = post_token(base, redeem(base, client_app, code, verifier))

    assert (replay.status_code, replay.json()["error"]) == (400, "invalid_grant")
    assert not works_at_mcp(base, tokens["access_token"])
    assert post_token(base, refresh_with(client_app, tokens["refresh_token"])).json()["error"] == "invalid_grant"


def test_an_unknown_code_revokes_nothing(live_people, client_app, asgi_server):
    base = asgi_server.url
    code, verifier = code_for(live_people, client_app, base)
    tokens = post_token(base, redeem(base, client_app, code, verifier)).json()
    stranger = post_token(base, redeem(base, client_app, "not-a-code-we-issued", verifier))
    assert (stranger.status_code, stranger.json()["error"]) == (400, "invalid_grant")
    assert works_at_mcp(base, tokens["access_token"])


def test_a_spent_code_without_its_verifier_revokes_nothing(live_people, client_app, asgi_server):
    """Someone who saw a spent code, but not its PKCE verifier, cannot end its holder's session with it."""
    base = asgi_server.url
    code, verifier = code_for(live_people, client_app, base)
    tokens = post_token(base, redeem(base, client_app, code, verifier)).json()
    replay = post_token(base, redeem(base, client_app, code, "a-verifier-the-attacker-made-up-" + "x" * 20))
    assert (replay.status_code, replay.json()["error"]) == (400, "invalid_grant")
    assert works_at_mcp(base, tokens["access_token"])
