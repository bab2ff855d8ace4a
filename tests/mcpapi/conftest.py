"""Fixtures: a server with production settings for the session, Redis cleanup."""

from __future__ import annotations

from collections.abc import Iterator

import pytest
import redis

from .live import KEY_PREFIX, REDIS_URL, RunningServer, serving


@pytest.fixture
def anyio_backend() -> str:
    return "asyncio"


@pytest.fixture(scope="session")
def mcp_server() -> Iterator[RunningServer]:
    """Production settings: 60 requests a minute, bursts of 10, 256 KiB, 25 s / 20 s."""
    with serving() as running:
        yield running


@pytest.fixture(scope="session", autouse=True)
def _flush_rate_limit_keys() -> Iterator[None]:
    yield
    client = redis.Redis.from_url(REDIS_URL)
    keys = list(client.scan_iter(match=KEY_PREFIX + "*"))
    if keys:
        client.delete(*keys)
    client.close()
