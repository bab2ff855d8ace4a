"""Personas, live servers and token helpers shared by the tests."""

from __future__ import annotations

import socket
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass

import pytest
import uvicorn


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


@dataclass
class LiveServer:
    url: str
    server: uvicorn.Server


@pytest.fixture
def asgi_server(transactional_db) -> Iterator[LiveServer]:
    """The project's real ASGI application under uvicorn on 127.0.0.1, in a thread
    of this process so it shares the test database."""
    from memoryhub.asgi import application

    port = free_port()
    config = uvicorn.Config(application, host="127.0.0.1", port=port, log_level="warning", lifespan="on")
    server = uvicorn.Server(config)
    thread = threading.Thread(target=server.run, daemon=True)
    thread.start()
    deadline = time.monotonic() + 30
    while not server.started:
        if time.monotonic() > deadline or not thread.is_alive():
            raise RuntimeError("uvicorn did not start")
        time.sleep(0.02)
    yield LiveServer(url=f"http://127.0.0.1:{port}", server=server)
    server.should_exit = True
    thread.join(15)
    from django.db import connections

    connections.close_all()
