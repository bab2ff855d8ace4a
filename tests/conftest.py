"""Personas, live servers and token helpers shared by the tests."""

from __future__ import annotations

import socket
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass

import pytest
import uvicorn

from tests.support.mcp_client import REVISIONS, offer_revision


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


@dataclass
class LiveServer:
    url: str
    server: uvicorn.Server


@pytest.fixture
def asgi_server(transactional_db, settings) -> Iterator[LiveServer]:
    """The project's real ASGI application (MCP gateway + Django) under uvicorn on
    127.0.0.1, in a thread of this process so it shares the test database. The
    public base URL is the live server's, so resource URLs and discovery match."""
    from memoryhub.asgi import django_app
    from memoryhub.mcp_wiring import build_asgi_application

    port = free_port()
    url = f"http://127.0.0.1:{port}"
    settings.BASE_URL = url
    settings.OAUTH2_PROVIDER = {**settings.OAUTH2_PROVIDER, "OIDC_ISS_ENDPOINT": url}
    settings.MEMORYHUB_ALLOWED_ORIGINS = [url]
    settings.CSRF_TRUSTED_ORIGINS = [url]
    application = build_asgi_application(django_app)
    config = uvicorn.Config(application, host="127.0.0.1", port=port, log_level="warning", lifespan="on")
    server = uvicorn.Server(config)
    thread = threading.Thread(target=server.run, daemon=True)
    thread.start()
    deadline = time.monotonic() + 30
    while not server.started:
        if time.monotonic() > deadline or not thread.is_alive():
            raise RuntimeError("uvicorn did not start")
        time.sleep(0.02)
    yield LiveServer(url=url, server=server)
    server.should_exit = True
    thread.join(15)
    from django.db import connections

    connections.close_all()


@pytest.fixture(params=REVISIONS)
def revision(request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch) -> str:
    """Each protocol revision the server accepts, offered by the official client."""
    return offer_revision(str(request.param), monkeypatch)
