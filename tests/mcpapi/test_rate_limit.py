"""60 requests a minute per principal, bursts of 10, shared through Redis."""

from __future__ import annotations

import os
import subprocess
import sys
import time
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import anyio
import httpx2
import pytest
from redis import asyncio as aioredis

import mcpapi
from mcpapi.auth import resource_url
from mcpapi.client import MEMORY_SCOPES, Principal, VerificationThrottled
from mcpapi.connection import FULL_ENDPOINT
from mcpapi.ratelimit import RateLimiter
from memoryhub.runtime.children import stop_child
from tests.conftest import free_port, poll
from tests.support.deployments import REAL_DEPLOYMENTS, RealDeployment

from .fakes import mint_token
from .live import KEY_PREFIX, REDIS_URL, RunningServer, serving
from .rpc_http import call_tool

BURST = 10


@pytest.fixture(scope="module")
def slow_refill_server() -> Iterator[RunningServer]:
    # One token a minute: the burst boundary holds however slowly the test runs.
    with serving(rate_per_minute=1, rate_burst=BURST) as running:
        yield running


def test_the_burst_is_served_and_the_next_request_gets_429(
    slow_refill_server: RunningServer,
) -> None:
    token = slow_refill_server.token()
    statuses = [
        call_tool(slow_refill_server.url(), token, "whoami", {}).status_code
        for _ in range(BURST)
    ]
    refused = call_tool(slow_refill_server.url(), token, "whoami", {})
    assert statuses == [200] * BURST
    assert refused.status_code == 429
    assert 1 <= int(refused.headers["retry-after"]) <= 60
    assert refused.json()["error"]["code"] == -32029


def test_each_principal_has_its_own_bucket(slow_refill_server: RunningServer) -> None:
    token = slow_refill_server.token(subject="shared-name", tenant="tenant-a")
    for _ in range(BURST):
        call_tool(slow_refill_server.url(), token, "whoami", {})
    assert call_tool(slow_refill_server.url(), token, "whoami", {}).status_code == 429
    same_subject_other_tenant = slow_refill_server.token(
        subject="shared-name", tenant="tenant-b"
    )
    same_subject_as_agent = slow_refill_server.token(
        subject="shared-name", tenant="tenant-a", kind="agent"
    )
    assert (
        call_tool(
            slow_refill_server.url(), same_subject_other_tenant, "whoami", {}
        ).status_code
        == 200
    )
    assert (
        call_tool(
            slow_refill_server.url(), same_subject_as_agent, "whoami", {}
        ).status_code
        == 200
    )


def test_a_refused_request_reaches_no_tool(slow_refill_server: RunningServer) -> None:
    token = slow_refill_server.token(subject="over-limit-writer")
    for _ in range(BURST):
        call_tool(slow_refill_server.url(), token, "whoami", {})
    call_tool(
        slow_refill_server.url(), token, "memory_write", {"content": "after the limit"}
    )
    assert not [
        c for c in slow_refill_server.store.calls if c[1].subject == "over-limit-writer"
    ]


@pytest.fixture(params=REAL_DEPLOYMENTS)
def real_deployment(request: pytest.FixtureRequest) -> RealDeployment:
    """The single-process app and the edge, each run at one request a minute with bursts of 10."""
    deployment: RealDeployment = request.getfixturevalue(f"{request.param}_deployment")
    return deployment


def test_a_real_deployment_serves_the_burst_and_refuses_the_next(real_deployment: RealDeployment) -> None:
    token = real_deployment.token(subject=f"burst-{uuid.uuid4().hex[:8]}")
    statuses = [call_tool(real_deployment.url(), token, "whoami", {}).status_code for _ in range(BURST)]
    refused = call_tool(real_deployment.url(), token, "whoami", {})
    assert statuses == [200] * BURST
    assert refused.status_code == 429
    assert 1 <= int(refused.headers["retry-after"]) <= 60
    assert refused.json()["error"]["code"] == -32029


def test_a_real_deployment_writes_nothing_past_the_limit(real_deployment: RealDeployment) -> None:
    subject = f"over-{uuid.uuid4().hex[:8]}"
    token = real_deployment.token(subject=subject)
    for _ in range(BURST):
        call_tool(real_deployment.url(), token, "whoami", {})
    refused = call_tool(real_deployment.url(), token, "memory_write", {"content": "Written past the rate limit."})
    assert refused.status_code == 429
    assert real_deployment.writes_by(subject) == 0


@pytest.fixture
def other_process() -> Iterator[str]:
    """A second gateway in its own process, on the same Redis and key prefix."""
    port = free_port()
    root = Path(mcpapi.__file__).resolve().parents[1]
    env = {
        **os.environ,
        "PYTHONPATH": os.pathsep.join([str(Path(__file__).parent), str(root)]),
    }
    process = subprocess.Popen(
        [
            sys.executable,
            str(Path(__file__).parent / "serve_fake.py"),
            str(port),
            KEY_PREFIX,
            "1",
            str(BURST),
        ],
        env=env,
    )
    base_url = f"http://127.0.0.1:{port}"
    def answering() -> bool:
        if process.poll() is not None:
            raise RuntimeError("second gateway did not start")
        try:
            httpx2.get(base_url + "/health", timeout=1)
        except httpx2.TransportError:
            return False
        return True

    try:
        poll(answering, timeout=20, interval=0.1, what="the second gateway to answer")
        yield base_url
    finally:
        stop_child(process, grace=10)


def test_processes_share_one_bucket(
    slow_refill_server: RunningServer, other_process: str
) -> None:
    resources = [
        resource_url(slow_refill_server.base_url, FULL_ENDPOINT),
        resource_url(other_process, FULL_ENDPOINT),
    ]
    token = mint_token(resource=resources)
    here = [
        call_tool(slow_refill_server.url(), token, "whoami", {}).status_code
        for _ in range(BURST // 2)
    ]
    there = [
        call_tool(other_process + "/mcp", token, "whoami", {}).status_code
        for _ in range(BURST // 2)
    ]
    assert here + there == [200] * BURST
    assert call_tool(other_process + "/mcp", token, "whoami", {}).status_code == 429
    assert call_tool(slow_refill_server.url(), token, "whoami", {}).status_code == 429


def _principal(subject: str) -> Principal:
    return Principal(
        tenant="tenant-a",
        subject=subject,
        kind="user",
        scopes=frozenset(MEMORY_SCOPES),
        client_id="c",
        resource="r",
    )


def test_the_production_bucket_holds_ten_and_refills_one_a_second() -> None:
    """60 a minute with bursts of 10. After the first ten, each case stages the bucket's
    state against Redis's own clock (the script's `now`), so no case depends on how fast
    this machine runs: an `at` in the future means no refill has accrued yet."""

    async def run() -> dict[str, Any]:
        limiter = RateLimiter(redis_url=REDIS_URL, per_minute=60, burst=10, key_prefix=KEY_PREFIX)
        raw = aioredis.Redis.from_url(REDIS_URL)
        principal = _principal(f"unit-{time.time_ns()}")
        key = limiter.key(principal)

        async def stage(tokens: float, age_ms: int) -> None:
            seconds, micros = await raw.time()
            now_ms = seconds * 1000 + micros // 1000
            await raw.hset(key, mapping={"tokens": repr(tokens), "at": str(now_ms - age_ms)})

        async def take_after(tokens: float, age_ms: int) -> tuple[bool, int, float]:
            await stage(tokens, age_ms)
            decision = await limiter.take(principal)
            left = float(await raw.hget(key, "tokens"))
            return decision.allowed, decision.retry_after_seconds, left

        try:
            fresh = [(await limiter.take(principal)).allowed for _ in range(10)]
            return {
                "fresh": fresh,
                "full": await take_after(10, -5000),
                "nearly_empty": await take_after(0.999, -5000),
                "one_second": await take_after(0, 1000),
                "idle_hour": await take_after(5, 3_600_000),
            }
        finally:
            await raw.aclose()
            await limiter.aclose()

    outcome = anyio.run(run)
    assert outcome["fresh"] == [True] * 10  # a new principal starts with a full bucket
    assert outcome["full"] == (True, 1, 9.0)  # ten held, one spent
    assert outcome["nearly_empty"][:2] == (False, 1)  # under one token: refused, retry in 1 s
    assert outcome["one_second"][0] is True  # a second refills exactly one
    assert outcome["idle_hour"] == (True, 1, 9.0)  # refill stops at ten


class _ThrottledVerifier:
    async def verify(self, token: str, *, resource: str) -> Principal | None:
        raise VerificationThrottled(7)


def test_a_throttled_verification_is_a_429_with_its_retry_after() -> None:
    """An edge's token exchange may refuse a token checked too often: the caller hears 429."""
    with serving(verifier=_ThrottledVerifier()) as running:
        response = call_tool(running.url(), running.token(), "whoami", {})
    assert response.status_code == 429
    assert response.headers["retry-after"] == "7"
    assert response.json()["error"]["code"] == -32029
    assert "Retry after 7 s" in response.json()["error"]["message"]


def test_it_fails_closed_when_redis_is_unreachable() -> None:
    with serving(redis_url="redis://127.0.0.1:1/0") as running:
        response = call_tool(running.url(), running.token(), "whoami", {})
    assert response.status_code == 503
    assert response.headers["retry-after"] == "1"
    assert "Traceback" not in response.text
