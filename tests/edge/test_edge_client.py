"""mcpapi.edge and mcpapi.edge_app on their own: what they send, how they read
the answers, and what the edge refuses to start with. No Django, no servers."""

from __future__ import annotations

import dataclasses
import datetime as dt
import json
import os
import subprocess
import sys
from pathlib import Path

import httpx2
import pytest

from mcpapi.client import MemoryServiceError, Principal, VerificationThrottled
from mcpapi.edge import ExchangingTokenVerifier, HttpMemoryClient, UpstreamUnavailable
from mcpapi.edge_app import edge_settings

ROOT = Path(__file__).resolve().parents[2]
RESOURCE = "https://memory.example.com/mcp"
AUDIENCE = "https://memory.example.com/internal/memory"
EXCHANGED = {
    "access_token": "credential-123",
    "issued_token_type": "urn:ietf:params:oauth:token-type:access_token",
    "token_type": "Bearer",
    "expires_in": 25,
    "scope": "memory.read memory.write",
    "audience": AUDIENCE,
    "resource": RESOURCE,
    "tenant": "t-1",
    "subject": "user:bruno",
    "principal_kind": "user",
    "client_id": "notes",
}
PRINCIPAL = Principal(tenant="t-1", subject="user:bruno", kind="user", scopes=frozenset({"memory.read"}),
                      client_id="notes", resource=RESOURCE, credential="credential-123")


def _http(handler) -> httpx2.AsyncClient:
    return httpx2.AsyncClient(transport=httpx2.MockTransport(handler))


async def _verify(status: int, body, token: str = "caller-token", headers: dict[str, str] | None = None
                  ) -> Principal | None:
    def handler(request: httpx2.Request) -> httpx2.Response:
        if isinstance(body, bytes):
            return httpx2.Response(status, content=body, headers=headers)
        return httpx2.Response(status, json=body, headers=headers)

    async with _http(handler) as http:
        verifier = ExchangingTokenVerifier(http=http, token_url="http://svc/o/token/exchange/", audience=AUDIENCE)
        return await verifier.verify(token, resource=RESOURCE)


@pytest.mark.anyio
async def test_the_exchange_answer_becomes_the_principal() -> None:
    principal = await _verify(200, EXCHANGED)
    assert principal == Principal(tenant="t-1", subject="user:bruno", kind="user",
                                  scopes=frozenset({"memory.read", "memory.write"}), client_id="notes",
                                  resource=RESOURCE, credential="credential-123")


@pytest.mark.anyio
@pytest.mark.parametrize("error", ["invalid_grant", "invalid_target", "invalid_scope", "invalid_request"])
async def test_a_refused_exchange_means_no_principal(error: str) -> None:
    assert await _verify(400, {"error": error}) is None


@pytest.mark.anyio
@pytest.mark.parametrize(
    ("status", "body"),
    [
        (500, b"<html>oops</html>"),
        (503, {"error": "temporarily_unavailable"}),
        (400, {"error": "unsupported_grant_type"}),
        (401, {"error": "invalid_client"}),
        (200, {**EXCHANGED, "audience": "https://elsewhere.example.com"}),
        (200, {**EXCHANGED, "resource": "https://memory.example.com/mcp/readonly"}),
        (200, {**EXCHANGED, "principal_kind": "admin"}),
        (200, {key: value for key, value in EXCHANGED.items() if key != "tenant"}),
    ],
)
async def test_a_failing_or_odd_exchange_is_an_outage_not_a_principal(status: int, body) -> None:
    # The gateway answers 503 for this: a broken authorisation server must not look like a bad token.
    with pytest.raises(UpstreamUnavailable):
        await _verify(status, body)


@pytest.mark.anyio
@pytest.mark.parametrize(
    ("retry_after", "expected"), [("17", 17), ("0", 1), (None, 1), ("Wed, 21 Oct 2026 07:28:00 GMT", 1)]
)
async def test_a_throttled_exchange_is_passed_on_as_throttling(retry_after: str | None, expected: int) -> None:
    # The gateway answers 429 with this Retry-After: the caller is asking too often, nothing is down.
    headers = {"Retry-After": retry_after} if retry_after is not None else None
    with pytest.raises(VerificationThrottled) as raised:
        await _verify(429, {"error": "rate_limited"}, headers=headers)
    assert raised.value.retry_after == expected


@pytest.mark.anyio
async def test_the_verifier_sends_the_rfc_8693_request_and_no_client_credentials() -> None:
    seen: list[httpx2.Request] = []

    def handler(request: httpx2.Request) -> httpx2.Response:
        seen.append(request)
        return httpx2.Response(200, json=EXCHANGED)

    async with _http(handler) as http:
        verifier = ExchangingTokenVerifier(http=http, token_url="http://svc/o/token/exchange/", audience=AUDIENCE)
        await verifier.verify("caller-token", resource=RESOURCE)
    [request] = seen
    assert request.method == "POST" and str(request.url) == "http://svc/o/token/exchange/"
    assert "authorization" not in request.headers
    form = dict(httpx2.QueryParams(request.content.decode()))
    assert form == {
        "grant_type": "urn:ietf:params:oauth:grant-type:token-exchange",
        "subject_token": "caller-token",
        "subject_token_type": "urn:ietf:params:oauth:token-type:access_token",
        "requested_token_type": "urn:ietf:params:oauth:token-type:access_token",
        "resource": RESOURCE,
        "audience": AUDIENCE,
    }


@pytest.mark.anyio
async def test_absurd_tokens_are_not_sent_anywhere() -> None:
    def handler(request: httpx2.Request) -> httpx2.Response:
        raise AssertionError("no exchange expected")

    async with _http(handler) as http:
        verifier = ExchangingTokenVerifier(http=http, token_url="http://svc/x", audience=AUDIENCE)
        assert await verifier.verify("", resource=RESOURCE) is None
        assert await verifier.verify("x" * 5000, resource=RESOURCE) is None


async def _client_call(status: int, body, operation: str = "search"):
    seen: list[httpx2.Request] = []

    def handler(request: httpx2.Request) -> httpx2.Response:
        seen.append(request)
        if isinstance(body, bytes):
            return httpx2.Response(status, content=body)
        return httpx2.Response(status, json=body)

    async with _http(handler) as http:
        client = HttpMemoryClient(http=http, service_url="http://svc/", read_timeout=20)
        if operation == "probe":
            return await client.probe(PRINCIPAL), seen
        when = dt.datetime(2026, 1, 2, 3, 4, 5, tzinfo=dt.UTC)
        return await client.search(PRINCIPAL, {"query": "q", "as_of": when, "limit": 10}), seen


@pytest.mark.anyio
async def test_the_client_sends_the_credential_and_json_plain_arguments() -> None:
    result, [request] = await _client_call(200, {"fragments": [], "receipt_id": "r-1"})
    assert result == {"fragments": [], "receipt_id": "r-1"}
    assert str(request.url) == "http://svc/internal/memory/search"
    assert request.headers["authorization"] == "Bearer credential-123"
    assert request.headers["memoryhub-read-timeout"] == "20"
    assert json.loads(request.content) == {"query": "q", "as_of": "2026-01-02T03:04:05+00:00", "limit": 10}


@pytest.mark.anyio
@pytest.mark.parametrize(
    ("status", "body", "code"),
    [
        (400, {"error": {"code": "invalid_argument", "message": "query is too long"}}, "invalid_argument"),
        (403, {"error": {"code": "permission_denied", "message": "not yours"}}, "permission_denied"),
        (401, {"error": {"code": "invalid_token", "message": "expired"}}, "unauthorized"),
    ],
)
async def test_service_refusals_become_tool_errors(status: int, body: dict, code: str) -> None:
    with pytest.raises(MemoryServiceError) as raised:
        await _client_call(status, body)
    assert raised.value.code == code


@pytest.mark.anyio
@pytest.mark.parametrize(("status", "body"), [(502, b"Bad gateway"), (500, {"unexpected": True}), (200, [1, 2])])
async def test_an_unreadable_answer_is_an_outage(status: int, body) -> None:
    with pytest.raises(UpstreamUnavailable):
        await _client_call(status, body)


@pytest.mark.anyio
@pytest.mark.parametrize(
    ("status", "body", "state"),
    [(200, {"read_pool_ready": "ready"}, "ready"), (200, {"read_pool_ready": "weird"}, "unavailable"),
     (503, b"down", "unavailable"), (401, {"error": {"code": "invalid_token", "message": "x"}}, "unavailable")],
)
async def test_the_probe_reports_failures_as_a_state(status: int, body, state: str) -> None:
    result, _ = await _client_call(status, body, operation="probe")
    assert result == state


@pytest.mark.anyio
async def test_without_a_credential_nothing_is_sent() -> None:
    def handler(request: httpx2.Request) -> httpx2.Response:
        raise AssertionError("nothing should be sent")

    async with _http(handler) as http:
        client = HttpMemoryClient(http=http, service_url="http://svc", read_timeout=20)
        with pytest.raises(MemoryServiceError):
            await client.write(dataclasses.replace(PRINCIPAL, credential=""), {"content": "x"})


@pytest.mark.parametrize("name", ["SECRET_KEY", "DATABASE_URL"])
def test_the_edge_refuses_to_start_with_a_secret_or_a_database(name: str) -> None:
    with pytest.raises(RuntimeError, match=name):
        edge_settings({"MEMORYHUB_BASE_URL": "https://memory.example.com", name: "x"})


def test_the_edge_is_configured_from_the_environment_alone() -> None:
    settings = edge_settings({
        "MEMORYHUB_BASE_URL": "https://memory.example.com/",
        "MEMORYHUB_SERVICE_URL": "http://memory-service:8000",
        "REDIS_URL": "redis://redis:6379/2",
        "MEMORYHUB_CACHE_PREFIX": "prod",
        "MEMORYHUB_ALLOWED_ORIGINS": "https://app.example.com, https://memory.example.com",
        "MEMORYHUB_RATE_PER_MINUTE": "120",
    })
    assert settings.gateway.base_url == "https://memory.example.com"
    assert settings.gateway.redis_url == "redis://redis:6379/2"
    assert settings.gateway.rate_limit_key_prefix == "prod:mcp:rate:"
    assert settings.gateway.allowed_origins == {"https://app.example.com", "https://memory.example.com"}
    assert settings.gateway.rate_per_minute == 120
    assert (settings.gateway.call_deadline, settings.gateway.upstream_read_timeout) == (25.0, 20.0)
    assert settings.token_exchange_url == "http://memory-service:8000/o/token/exchange/"
    assert settings.service_audience == "https://memory.example.com/internal/memory"


def test_building_the_edge_app_loads_no_django_and_no_domain() -> None:
    code = (
        "import sys\n"
        "import mcpapi.edge_app\n"
        "app = mcpapi.edge_app.application\n"
        "loaded = sorted(m for m in sys.modules if m.split('.')[0] in "
        "('django', 'memoryhub', 'oauth2_provider', 'rest_framework', 'psycopg', 'celery'))\n"
        "assert not loaded, loaded\n"
    )
    env = {"PATH": os.environ.get("PATH", ""), "PYTHONPATH": str(ROOT), "MEMORYHUB_BASE_URL": "http://127.0.0.1:1"}
    completed = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=120)
    assert completed.returncode == 0, completed.stderr
