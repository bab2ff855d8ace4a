"""Cancelling a database connection's statement when a deadline passes,
without a round trip per statement.

A read that must finish by a deadline registers its connection here for the
time it runs statements (`watching`). One thread per process keeps the
registrations in deadline order; when one passes while still registered, it
sends PostgreSQL's cancel request for that connection (psycopg's
`cancel_safe`, on a thread of its own so one slow cancel holds up no other
deadline), and the statement running then fails with QueryCanceled, as it
would under statement_timeout. It sends it again every RETRY_SECONDS while
the registration lasts, so a statement that reached the server just after a
cancel is cancelled too.

PostgreSQL drops a cancel request that reaches a connection between
statements (libpq: "if the server was already done processing the command,
there will be no visible result at all"), and `watching` does not return
while a cancel for it is being sent, so a cancel never reaches a statement
issued after the watch ended. That holds for a connection straight to
PostgreSQL, which is how the product connects; a transaction-pooling proxy
in between forwards cancels on its own schedule.

The caller checks the clock before each statement itself (search.Deadline
installs an execute wrapper), so no statement starts after the deadline.
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

# While a watch lasts past its deadline, its cancel is sent again this often.
RETRY_SECONDS = 0.1


def _nothing() -> None:
    return None


@dataclass(eq=False)
class Watch:
    ends: float
    cancel: Callable[[], None]
    active: bool = True
    fired: bool = False
    lock: threading.Lock = field(default_factory=threading.Lock)


class _Watcher:
    def __init__(self) -> None:
        self._reset()

    def _reset(self) -> None:
        """A fresh state (also in a forked child: the parent's thread and locks are not its own)."""
        self._condition = threading.Condition()
        self._heap: list[tuple[float, int, Watch]] = []
        self._order = itertools.count()
        self._thread: threading.Thread | None = None

    def add(self, watch: Watch, at: float | None = None) -> None:
        with self._condition:
            heapq.heappush(self._heap, (watch.ends if at is None else at, next(self._order), watch))
            if self._thread is None or not self._thread.is_alive():
                self._thread = threading.Thread(target=self._run, name="memoryhub-deadline", daemon=True)
                self._thread.start()
            self._condition.notify()

    def _run(self) -> None:
        while True:
            with self._condition:
                while not self._heap:
                    self._condition.wait()
                at, _, watch = self._heap[0]
                wait = at - time.monotonic()
                if wait > 0:
                    self._condition.wait(wait)
                    continue
                heapq.heappop(self._heap)
            if watch.active:
                if not watch.lock.locked():  # one cancel at a time per watch: a slow one is not queued behind
                    threading.Thread(target=_fire, args=(watch,), name="memoryhub-cancel", daemon=True).start()
                self.add(watch, at=time.monotonic() + RETRY_SECONDS)


def _fire(watch: Watch) -> None:
    with watch.lock:
        if not watch.active:
            return
        watch.fired = True
        try:
            watch.cancel()
        except Exception:  # noqa: BLE001 - the next retry, or the caller's own check, still stops the read
            logger.exception("could not send the cancel request of a read past its deadline")


_WATCHER = _Watcher()
if hasattr(os, "register_at_fork"):
    os.register_at_fork(after_in_child=_WATCHER._reset)


@contextlib.contextmanager
def watching(ends: float, cancel: Callable[[], None]) -> Iterator[Watch]:
    """Call `cancel` if time.monotonic() reaches `ends` before the block ends
    (and again every RETRY_SECONDS until it does)."""
    watch = Watch(ends=ends, cancel=cancel)
    _WATCHER.add(watch)
    try:
        yield watch
    finally:
        watch.active = False  # a cancel not yet sent is not sent
        with watch.lock:  # waits for a cancel being sent right now
            watch.cancel = _nothing  # an ended watch keeps no connection alive while it waits to be dropped
