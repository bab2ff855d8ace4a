"""Fixtures: the deployments the MCP suites run against, and Redis cleanup.

`mcp_server` is mcpapi's gateway over the fake memory service, with production settings.
`deployment` is each of "fake", "app" (the single-process product) and "edge" (an edge
process in front of a memory-service process) in turn, for the transport, auth, limit and
fuzz suites: the rules they check hold wherever the endpoint is deployed.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest
import redis

from tests.edge.live import edge_stack
from tests.support.deployments import REAL_DEPLOYMENTS, SUITE_RATE_ENV, RealDeployment, single_process

from .live import KEY_PREFIX, REDIS_URL, RunningServer, serving

DEPLOYMENTS = ("fake", *REAL_DEPLOYMENTS)


@pytest.fixture
def anyio_backend() -> str:
    return "asyncio"


@pytest.fixture(scope="session")
def mcp_server() -> Iterator[RunningServer]:
    """Production settings: 60 requests a minute, bursts of 10, 256 KiB, 25 s / 20 s."""
    with serving() as running:
        yield running


@pytest.fixture(scope="session")
def app_deployment(django_db_setup: Any, django_db_blocker: Any) -> Iterator[RealDeployment]:
    from django.db import connection

    with single_process(dict(connection.settings_dict), django_db_blocker, gateway_env=SUITE_RATE_ENV) as app:
        yield app


@pytest.fixture(scope="session")
def edge_deployment(django_db_setup: Any, django_db_blocker: Any) -> Iterator[RealDeployment]:
    from django.db import connection

    with edge_stack(dict(connection.settings_dict), gateway_env=SUITE_RATE_ENV) as stack:
        yield RealDeployment(name="edge", base_url=stack.edge_url, db_blocker=django_db_blocker)


@pytest.fixture(scope="session", params=DEPLOYMENTS)
def deployment(request: pytest.FixtureRequest) -> RunningServer | RealDeployment:
    if request.param == "fake":
        server: RunningServer = request.getfixturevalue("mcp_server")
        return server
    real: RealDeployment = request.getfixturevalue(f"{request.param}_deployment")
    return real


@pytest.fixture(scope="session", autouse=True)
def _flush_rate_limit_keys() -> Iterator[None]:
    yield
    client = redis.Redis.from_url(REDIS_URL)
    keys = list(client.scan_iter(match=KEY_PREFIX + "*"))
    if keys:
        client.delete(*keys)
    client.close()
