"""A server's worker does before its first request what that request would
otherwise wait for: the encoder loaded and run once, the ranking revision
worked out. A worker's first search waited about half a second for them
(bench/: docs/benchmarks.md, "Search at its floor, tenth step").

The worker's application is the project's own (memoryhub.asgi's composition),
started as a server starts it: its lifespan startup, which a server completes
before it gives the worker any request."""

from __future__ import annotations

import gc
import logging
from typing import Any

import anyio
import pytest

from memoryhub import embeddings
from memoryhub.services import search
from tests.support.lifespan import lifespan_messages


def _started(application: Any, seen: dict[str, Any]) -> list[str]:
    """The messages the application sends for a startup and a shutdown; in
    `seen`, whether the encoder and the ranking revision were ready when it
    said it had started."""
    def sent(kind: str) -> None:
        if kind == "lifespan.startup.complete":
            seen.update(encoder=embeddings._singleton, digest=search._digest)

    return lifespan_messages(application, on_send=sent)


@pytest.fixture
def cold(monkeypatch: pytest.MonkeyPatch) -> None:
    """A process that has not searched yet."""
    embeddings.reset_embedder()
    monkeypatch.setattr(search, "_digest", None)


def _application() -> Any:
    from memoryhub.asgi import django_app
    from memoryhub.mcp_adapter.wiring import build_asgi_application

    return build_asgi_application(django_app)


@pytest.fixture
def application() -> Any:
    """Built before the test runs: the first build in a process sets Django up,
    which configures logging anew and would drop the log capture of a test
    already running."""
    return _application()


def test_a_worker_has_its_encoder_and_ranking_revision_before_it_says_it_has_started(cold) -> None:
    seen: dict[str, Any] = {}
    assert _started(_application(), seen) == ["lifespan.startup.complete", "lifespan.shutdown.complete"]
    assert seen["encoder"] is not None, "the encoder was not loaded before the worker took requests"
    assert seen["digest"] == search._ordering_code_digest()
    # The encoder it loaded is the process's own: the first search uses it, and loads nothing.
    assert embeddings.get_embedder() is seen["encoder"]


@pytest.mark.parametrize(("broken", "logged", "ready", "unready"), [
    ("get_embedder", "encoder failed to start", "digest", "encoder"),
    ("_ordering_code_digest", "ranking revision could not be worked out", "encoder", "digest"),
])
def test_a_worker_whose_warm_up_fails_still_starts_and_says_why(cold, application, monkeypatch, caplog, broken,
                                                                logged, ready, unready) -> None:
    """The encoder failing to load, or the ranking revision failing to be worked out: the other is still
    made ready, the worker still starts, and the log says what failed."""
    def failing() -> Any:
        raise RuntimeError(f"{broken} is broken")

    monkeypatch.setattr(search, broken, failing)
    seen: dict[str, Any] = {}
    with caplog.at_level(logging.ERROR, logger="memoryhub.search"):
        assert _started(application, seen) == ["lifespan.startup.complete", "lifespan.shutdown.complete"]
    assert seen[ready] is not None and seen[unready] is None
    failed = [record for record in caplog.records if logged in record.getMessage()]
    assert failed and f"{broken} is broken" in str(failed[0].exc_info[1])


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


@pytest.fixture
def collector() -> Any:
    """The test process's collector as it was, put back after the test."""
    threshold = gc.get_threshold()
    yield
    gc.unfreeze()
    gc.set_threshold(*threshold)


@pytest.mark.parametrize("settle", ["1", "0", None])
def test_a_servers_worker_settles_its_heap_once_warm(collector, monkeypatch, settle) -> None:
    """In a process mcpapi.serving started (MEMORYHUB_SETTLE_HEAP=1), the heap
    is settled after the warm-up, before the worker says it has started; in
    any other process the collector is left as it is."""
    from mcpapi import serving
    from memoryhub.mcp_adapter.wiring import WarmedAtStartup

    if settle is None:
        monkeypatch.delenv(serving.SETTLE_HEAP, raising=False)
    else:
        monkeypatch.setenv(serving.SETTLE_HEAP, settle)
    monkeypatch.setenv(serving.YOUNG_THRESHOLD, "12345")
    threshold = gc.get_threshold()
    warmed: list[int] = []
    seen: dict[str, Any] = {}

    async def inner(scope: dict[str, Any], receive: Any, send: Any) -> None:
        while (await receive())["type"] != "lifespan.shutdown":
            await send({"type": "lifespan.startup.complete"})
        await send({"type": "lifespan.shutdown.complete"})

    def sent(kind: str) -> None:
        if kind == "lifespan.startup.complete":
            seen.update(frozen=gc.get_freeze_count(), threshold=gc.get_threshold())

    application = WarmedAtStartup(inner, warm=lambda: warmed.append(gc.get_freeze_count()))
    assert lifespan_messages(application, on_send=sent) == ["lifespan.startup.complete", "lifespan.shutdown.complete"]
    assert warmed == [0]
    if settle == "1":
        assert seen["frozen"] > 0 and seen["threshold"] == (12345, *threshold[1:])
    else:
        assert seen == {"frozen": 0, "threshold": threshold}
