"""Cancelling a database connection's statement when a deadline passes,
without a round trip per statement.

A read that must finish by a deadline registers its connection here for the
time it runs statements (`watching`). One thread per process keeps the
registrations in deadline order; when one passes while still registered, it
sends PostgreSQL's cancel request for that connection (psycopg's
`cancel_safe`), and the statement running then fails with QueryCanceled, as
it would under statement_timeout. PostgreSQL drops a cancel request that
reaches a connection between statements, and `watching` does not return
while a cancel for it is being sent, so a cancel never reaches a statement
issued after the watch ended.
"""

from __future__ import annotations

import contextlib
import heapq
import itertools
import logging
import os
import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field

logger = logging.getLogger("memoryhub.deadline")


@dataclass(eq=False)
class Watch:
    ends: float
    cancel: Callable[[], None]
    active: bool = True
    fired: bool = False
    lock: threading.Lock = field(default_factory=threading.Lock)


class _Watcher:
    def __init__(self) -> None:
        self._pid = os.getpid()
        self._condition = threading.Condition()
        self._heap: list[tuple[float, int, Watch]] = []
        self._order = itertools.count()
        self._thread: threading.Thread | None = None

    def add(self, watch: Watch) -> None:
        with self._condition:
            if self._pid != os.getpid():  # a forked child: the parent's thread is not here
                self._pid, self._heap, self._thread = os.getpid(), [], None
            heapq.heappush(self._heap, (watch.ends, next(self._order), watch))
            if self._thread is None or not self._thread.is_alive():
                self._thread = threading.Thread(target=self._run, name="memoryhub-deadline", daemon=True)
                self._thread.start()
            self._condition.notify()

    def _run(self) -> None:
        while True:
            with self._condition:
                while not self._heap:
                    self._condition.wait()
                ends, _, watch = self._heap[0]
                wait = ends - time.monotonic()
                if wait > 0:
                    self._condition.wait(wait)
                    continue
                heapq.heappop(self._heap)
            _fire(watch)


def _fire(watch: Watch) -> None:
    with watch.lock:
        if not watch.active:
            return
        watch.fired = True
        try:
            watch.cancel()
        except Exception:  # noqa: BLE001 - the statement then runs on; the caller's own check still stops the read
            logger.exception("could not send the cancel request of a read past its deadline")


_WATCHER = _Watcher()


@contextlib.contextmanager
def watching(ends: float, cancel: Callable[[], None]) -> Iterator[Watch]:
    """Call `cancel` if time.monotonic() reaches `ends` before the block ends."""
    watch = Watch(ends=ends, cancel=cancel)
    _WATCHER.add(watch)
    try:
        yield watch
    finally:
        with watch.lock:  # waits for a cancel being sent right now
            watch.active = False
