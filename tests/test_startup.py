"""A server's worker does before its first request what that request would
otherwise wait for: the encoder loaded and run once, the ranking revision
worked out. A worker's first search waited about half a second for them
(bench/: docs/benchmarks.md, "Search at its floor, tenth step").

The worker's application is the project's own (memoryhub.asgi's composition),
started as a server starts it: its lifespan startup, which a server completes
before it gives the worker any request."""

from __future__ import annotations

import logging
from typing import Any

import anyio
import pytest

from memoryhub import embeddings
from memoryhub.services import search


def _started(application: Any, seen: dict[str, Any]) -> list[str]:
    """The messages the application sends for a startup and a shutdown; in
    `seen`, whether the encoder and the ranking revision were ready when it
    said it had started."""
    async def run() -> list[str]:
        inbox = [{"type": "lifespan.startup"}, {"type": "lifespan.shutdown"}]
        outbox: list[str] = []

        async def receive() -> dict[str, str]:
            return inbox.pop(0)

        async def send(message: dict[str, str]) -> None:
            if message["type"] == "lifespan.startup.complete":
                seen.update(encoder=embeddings._singleton, digest=search._digest)
            outbox.append(message["type"])

        await application({"type": "lifespan", "asgi": {"version": "3.0"}}, receive, send)
        return outbox

    return anyio.run(run)


@pytest.fixture
def cold(monkeypatch: pytest.MonkeyPatch) -> None:
    """A process that has not searched yet."""
    embeddings.reset_embedder()
    monkeypatch.setattr(search, "_digest", None)


def _application() -> Any:
    from memoryhub.asgi import django_app
    from memoryhub.mcp_adapter.wiring import build_asgi_application

    return build_asgi_application(django_app)


def test_a_worker_has_its_encoder_and_ranking_revision_before_it_says_it_has_started(cold) -> None:
    seen: dict[str, Any] = {}
    assert _started(_application(), seen) == ["lifespan.startup.complete", "lifespan.shutdown.complete"]
    assert seen["encoder"] is not None, "the encoder was not loaded before the worker took requests"
    assert seen["digest"] == search._ordering_code_digest()
    # The encoder it loaded is the process's own: the first search uses it, and loads nothing.
    assert embeddings.get_embedder() is seen["encoder"]


def test_a_worker_whose_encoder_fails_still_starts_and_says_why(cold, monkeypatch, caplog) -> None:
    def broken() -> Any:
        raise RuntimeError("the model file is unreadable")

    monkeypatch.setattr(search, "get_embedder", broken)
    seen: dict[str, Any] = {}
    with caplog.at_level(logging.ERROR, logger="memoryhub.search"):
        assert _started(_application(), seen) == ["lifespan.startup.complete", "lifespan.shutdown.complete"]
    assert seen["digest"] is not None
    failed = [record for record in caplog.records if "encoder failed to start" in record.getMessage()]
    assert failed and "the model file is unreadable" in str(failed[0].exc_info[1])


def test_a_worker_whose_ranking_revision_fails_still_starts_and_says_why(cold, monkeypatch, caplog) -> None:
    def broken() -> str:
        raise RuntimeError("the ordering code's source is unreadable")

    monkeypatch.setattr(search, "_ordering_code_digest", broken)
    seen: dict[str, Any] = {}
    with caplog.at_level(logging.ERROR, logger="memoryhub.search"):
        assert _started(_application(), seen) == ["lifespan.startup.complete", "lifespan.shutdown.complete"]
    assert seen["digest"] is None and seen["encoder"] is not None
    failed = [record for record in caplog.records if "ranking revision could not be worked out" in record.getMessage()]
    assert failed and "source is unreadable" in str(failed[0].exc_info[1])


def test_every_other_scope_passes_through_untouched() -> None:
    from memoryhub.mcp_adapter.wiring import WarmedAtStartup

    warmed: list[str] = []
    seen: list[tuple[str, Any]] = []

    async def inner(scope: dict[str, Any], receive: Any, send: Any) -> None:
        seen.append((scope["type"], await receive()))

    async def receive() -> dict[str, str]:
        return {"type": "http.request"}

    async def nothing(message: Any) -> None:
        return None

    application = WarmedAtStartup(inner, warm=lambda: warmed.append("warmed"))
    for kind in ("http", "websocket"):
        anyio.run(application, {"type": kind}, receive, nothing)
    assert seen == [("http", {"type": "http.request"}), ("websocket", {"type": "http.request"})]
    assert warmed == []
