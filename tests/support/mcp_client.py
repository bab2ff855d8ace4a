"""The official `mcp` client as the tests drive it, at each protocol revision the server accepts.

The `revision` fixture (tests/conftest.py) parametrizes a test over REVISIONS.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Any

import httpx2
import mcp.client.session
import pytest
from mcp import Client
from mcp.client.streamable_http import streamable_http_client

# The revisions the server accepts: the stateless one and two on the initialize handshake.
REVISIONS = ["2026-07-28", "2025-11-25", "2025-06-18"]


def offer_revision(revision: str, monkeypatch: pytest.MonkeyPatch) -> str:
    """Make the client offer `revision`: it offers its newest handshake revision by itself."""
    if revision == "2025-06-18":
        monkeypatch.setattr(mcp.client.session, "LATEST_HANDSHAKE_VERSION", "2025-06-18")
    return revision


@asynccontextmanager
async def connect(url: str, token: str, revision: str) -> AsyncIterator[Client]:
    """A client session at `revision` with `token` as its bearer credential."""
    mode = revision if revision == "2026-07-28" else "legacy"
    async with (
        httpx2.AsyncClient(headers={"Authorization": f"Bearer {token}"}, timeout=120, trust_env=False) as http,
        Client(streamable_http_client(url, http_client=http), mode=mode, cache=None) as client,
    ):
        assert client.protocol_version == revision
        yield client


async def call(client: Client, name: str, arguments: dict[str, Any]) -> dict[str, Any]:
    """A tool's structured result; fails the test on a tool error."""
    result = await client.call_tool(name, arguments)
    assert not result.is_error, result.content
    assert result.structured_content is not None
    return result.structured_content
