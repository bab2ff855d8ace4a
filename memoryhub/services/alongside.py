"""Texts embedded on a thread of their own while the statements that do not
need their vectors run: a search's query (its prologue and the compiling of
its index statement go on meanwhile) and a write's facts (its idempotency
claim and its writer's lock).

Only where the encoder leaves the process a core (embeds_alongside): a
server's worker, one per core, encodes on one thread. With an encoder on every
core, the texts are embedded at once, before any statement. The encoder
releases Python's lock while it runs; it touches no database, so the thread
has no connection of its own."""

from __future__ import annotations

import contextlib
import contextvars
import os
import threading
from collections.abc import Callable
from concurrent.futures import Future, ThreadPoolExecutor
from typing import Protocol

from memoryhub.embeddings import get_embedder, leaves_a_core
from memoryhub.observability import phase

Vectors = list[list[float]] | None


class Deadline(Protocol):
    def remaining(self) -> float: ...

    def exceeded(self) -> Exception: ...


_POOL_LOCK = threading.Lock()
_pool: ThreadPoolExecutor | None = None


def _embedding_pool() -> ThreadPoolExecutor:
    global _pool
    with _POOL_LOCK:
        if _pool is None:
            # As many threads as asgiref's and Python's own default pools: one
            # for each search or write a process runs at once, up to a point.
            _pool = ThreadPoolExecutor(max_workers=min(32, (os.cpu_count() or 1) + 4),
                                       thread_name_prefix="memoryhub-embed")
        return _pool


def _forget_pool() -> None:
    """In a forked child: the parent's threads are not its own."""
    global _pool, _POOL_LOCK
    _pool, _POOL_LOCK = None, threading.Lock()


if hasattr(os, "register_at_fork"):
    os.register_at_fork(after_in_child=_forget_pool)


def embeds_alongside() -> bool:
    """Whether texts are embedded on a thread of their own (Embedding): only
    when the encoder leaves this process a core for the rest of the work. A
    server's worker (one per core) encodes on one thread, and there it saved
    2.2 ms a search at 10k and 2.6 at 100k; with an encoder on every core it
    gained nothing (+0.4 and -0.2 ms; bench/bench_alongside.py,
    docs/benchmarks.md, "eighth step")."""
    try:
        return leaves_a_core(get_embedder())
    except Exception:  # noqa: BLE001 - an embedder that cannot be made is the embedding's to report
        return False


class Embedding:
    """`texts` being embedded by `embed` (which returns None where the
    embedder failed, having said so), when embeds_alongside() on a thread of
    its own, otherwise at once. The work waits for it where it needs the
    vectors (`vectors`), no longer than its deadline if it has one, and that
    wait is timed as the search phase `waiting` names, if it names one.

    A write's wait has no deadline, as its embedding at once had none; it
    holds the writer's lock meanwhile, and the pool's threads are shared by
    the process's searches and writes (one at a time per thread)."""

    waiting: str | None = None

    def __init__(self, texts: list[str], embed: Callable[[list[str]], Vectors]) -> None:
        self._future: Future[Vectors]
        if texts and embeds_alongside():
            try:
                # The request's context goes with it, for the logs of a failure.
                self._future = _embedding_pool().submit(contextvars.copy_context().run, embed, texts)
                return
            except RuntimeError:  # the interpreter is shutting down: the pool takes no more work
                pass
        self._future = Future()
        self._future.set_result(embed(texts))

    def failed(self) -> bool:
        """Finished without vectors: a statement that would compare with one is not worth compiling."""
        return self._future.done() and self._future.result() is None

    def vectors(self, deadline: Deadline | None = None) -> Vectors:
        """The vectors, waited for until `deadline` at most (its `exceeded()` is raised)."""
        if not self._future.done():
            with phase(self.waiting) if self.waiting else contextlib.nullcontext():
                try:
                    return self._future.result(timeout=deadline.remaining() if deadline is not None else None)
                except TimeoutError:
                    assert deadline is not None
                    raise deadline.exceeded() from None
        return self._future.result()

    def cancel(self) -> None:
        """Not begun, it never will be; begun, it runs on and nobody waits for it."""
        self._future.cancel()
