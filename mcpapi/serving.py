"""The HTTP server memoryhub's processes run under: uvicorn, with deadlines a
slow client cannot outwait.

    python -m mcpapi.serving memoryhub.asgi:application --port 8000 [--workers N]
    python -m mcpapi.serving mcpapi.edge_app:application --port 8080

uvicorn on its own waits as long as a client likes for a request's headers and
body (it times out only idle keep-alive connections), so a client sending one
byte every few seconds holds a connection, and enough of them stop the server
accepting new ones. `GuardedHttpToolsProtocol` gives every request a deadline
for its headers (from the first byte, or from the connection for its first
request) and one for its body; past either the client gets 408 (or, once a
response has begun, the connection is closed) and the event is logged. A
request line and headers past HEADER_BYTES_MAX bytes or HEADER_FIELDS_MAX
fields get 431 before the application sees them (uvicorn keeps any amount). The
connection and keep-alive limits are set here too, and one worker process per
core by default.

It lives in mcpapi, which imports neither Django nor the domain, because the
edge process runs under it as well.

Settings (environment): MEMORYHUB_HEADER_TIMEOUT_SECONDS (10),
MEMORYHUB_BODY_TIMEOUT_SECONDS (30), MEMORYHUB_MAX_CONNECTIONS (512 per
process; beyond it uvicorn answers 503), MEMORYHUB_KEEP_ALIVE_SECONDS (5),
MEMORYHUB_WORKERS (one per core), MEMORYHUB_CORES_PER_PROCESS (the cores
divided among the workers, at least one: each worker sizes its thread pools to
it), MEMORYHUB_TRUSTED_PROXIES (comma-separated
addresses whose X-Forwarded-For/-Proto are believed; none by default). With
more than one worker, Prometheus metrics are kept per process in
PROMETHEUS_MULTIPROC_DIR (a fresh folder unless set) and added up at /metrics.
Each worker settles its heap once its application has started
(settle_heap: MEMORYHUB_SETTLE_HEAP, 1; MEMORYHUB_GC_YOUNG_THRESHOLD, 20000).
"""

from __future__ import annotations

import argparse
import asyncio
import gc
import logging
import os
import tempfile
import time
from typing import Any

from uvicorn.protocols.http.httptools_impl import HttpToolsProtocol

logger = logging.getLogger("mcpapi.serving")


def _float(name: str, default: float) -> float:
    return float(os.environ.get(name) or default)


def _int(name: str, default: int) -> int:
    return int(os.environ.get(name) or default)


HEADER_TIMEOUT_SECONDS = _float("MEMORYHUB_HEADER_TIMEOUT_SECONDS", 10.0)
BODY_TIMEOUT_SECONDS = _float("MEMORYHUB_BODY_TIMEOUT_SECONDS", 30.0)
# The request line and every header together (an OAuth authorize URL with its
# redirect URI and resource, a bearer token, cookies: a few KiB), and the
# number of header fields.
HEADER_BYTES_MAX = 64 * 1024
HEADER_FIELDS_MAX = 100


class _HeadersTooLarge(Exception):
    """Raised in a parser callback; httptools reports it as a parser error."""

def _headers_too_large_response() -> bytes:
    body = (f"The request line and headers are too large: at most {HEADER_BYTES_MAX} bytes and "
            f"{HEADER_FIELDS_MAX} header fields.\n").encode()
    return (b"HTTP/1.1 431 Request Header Fields Too Large\r\ncontent-type: text/plain; charset=utf-8\r\n"
            b"connection: close\r\n" + f"content-length: {len(body)}\r\n\r\n".encode() + body)


def _timeout_response() -> bytes:
    body = b"The request did not arrive in time; send it again.\n"
    return (b"HTTP/1.1 408 Request Timeout\r\ncontent-type: text/plain; charset=utf-8\r\nconnection: close\r\n"
            + f"content-length: {len(body)}\r\n\r\n".encode() + body)


class GuardedHttpToolsProtocol(HttpToolsProtocol):
    """uvicorn's httptools protocol with a deadline for each request's headers
    and one for its body."""

    header_seconds = HEADER_TIMEOUT_SECONDS
    body_seconds = BODY_TIMEOUT_SECONDS

    def connection_made(self, transport: asyncio.Transport) -> None:  # type: ignore[override]
        self._deadline: asyncio.TimerHandle | None = None
        self._waiting_for = ""
        super().connection_made(transport)
        self._arm("headers", self.header_seconds)

    def data_received(self, data: bytes) -> None:
        if self._deadline is None:
            # A new request on a kept-alive connection: its headers have a deadline too.
            self._arm("headers", self.header_seconds)
        super().data_received(data)

    def on_message_begin(self) -> None:
        super().on_message_begin()
        self._header_bytes = 0
        self._headers_too_large = False

    def on_url(self, url: bytes) -> None:
        self._count_header_bytes(len(url))
        super().on_url(url)

    def on_header(self, name: bytes, value: bytes) -> None:
        self._count_header_bytes(len(name) + len(value))
        if len(self.headers) >= HEADER_FIELDS_MAX:
            self._headers_too_large = True
            raise _HeadersTooLarge
        super().on_header(name, value)

    def _count_header_bytes(self, size: int) -> None:
        self._header_bytes += size
        if self._header_bytes > HEADER_BYTES_MAX:
            self._headers_too_large = True
            raise _HeadersTooLarge

    def send_400_response(self, msg: str) -> None:
        # A parser error raised by our own limit is a 431, not uvicorn's generic 400.
        if not getattr(self, "_headers_too_large", False):
            super().send_400_response(msg)
            return
        self._disarm()
        client = f"{self.client[0]}:{self.client[1]}" if self.client else "unknown client"
        logger.warning("closing the connection of %s: its request line and headers passed the limit", client)
        self.transport.write(_headers_too_large_response())
        self.transport.close()

    def on_headers_complete(self) -> None:
        super().on_headers_complete()
        self._arm("body", self.body_seconds)

    def on_message_complete(self) -> None:
        super().on_message_complete()
        self._disarm()

    def on_response_complete(self) -> None:
        self._disarm()
        super().on_response_complete()
        # A pipelined request started now: its body (if still arriving) has its own deadline.
        cycle = getattr(self, "cycle", None)
        if cycle is not None and not cycle.response_complete and cycle.more_body and not self.transport.is_closing():
            self._arm("body", self.body_seconds)

    def connection_lost(self, exc: Exception | None) -> None:
        self._disarm()
        super().connection_lost(exc)

    def _arm(self, what: str, seconds: float) -> None:
        self._disarm()
        self._waiting_for = what
        self._due = time.monotonic() + seconds
        self._deadline = self.loop.call_later(seconds, self._expired)

    def _disarm(self) -> None:
        if getattr(self, "_deadline", None) is not None:
            self._deadline.cancel()  # type: ignore[union-attr]
        self._deadline = None

    def _expired(self) -> None:
        self._deadline = None
        if self.transport.is_closing():
            return
        left = self._due - time.monotonic()
        if left > 0:
            # The loop's timers may fire early: uvloop counts from the time its
            # loop last read the clock, in whole milliseconds. A client always has
            # its full time. (A millisecond more: uvloop runs a shorter delay at once.)
            self._deadline = self.loop.call_later(left + 0.001, self._expired)
            return
        if self.pipeline:
            # Requests wait behind one still being answered (reading is paused):
            # the delay is ours, not the client's. Its deadline starts with its turn.
            self._arm(self._waiting_for, self.header_seconds if self._waiting_for == "headers" else self.body_seconds)
            return
        client = f"{self.client[0]}:{self.client[1]}" if self.client else "unknown client"
        logger.warning("closing the connection of %s: the request's %s did not arrive within %g s", client,
                       self._waiting_for, self.header_seconds if self._waiting_for == "headers" else self.body_seconds)
        cycle = getattr(self, "cycle", None)
        if cycle is None or not cycle.response_started:
            self.transport.write(_timeout_response())
        if cycle is not None:
            # The application hears that the client went away (http.disconnect), so a
            # request it was still reading is dropped, never run after the 408; any
            # late answer of its goes nowhere.
            cycle.disconnected = True
            cycle.response_complete = True
            cycle.message_event.set()
        self.transport.close()


def server_options() -> dict[str, Any]:
    """uvicorn settings every memoryhub process runs with."""
    trusted = [item.strip() for item in os.environ.get("MEMORYHUB_TRUSTED_PROXIES", "").split(",") if item.strip()]
    return {
        "http": GuardedHttpToolsProtocol,
        "limit_concurrency": _int("MEMORYHUB_MAX_CONNECTIONS", 512),
        "timeout_keep_alive": _int("MEMORYHUB_KEEP_ALIVE_SECONDS", 5),
        "lifespan": "on",
        "ws": "none",  # no websockets here: an upgrade request is an ordinary (refused) request
        # X-Forwarded-For/-Proto only from configured proxies: otherwise any local
        # client could choose its own address for every per-address limit.
        "proxy_headers": bool(trusted),
        "forwarded_allow_ips": ",".join(trusted) or "",
        "access_log": False,
    }


def default_workers() -> int:
    return _int("MEMORYHUB_WORKERS", os.cpu_count() or 1)


# The cores each worker process may keep busy at once (what a thread pool in it,
# the query embedder's, is sized to): the machine's, shared by the workers.
CORES_PER_PROCESS = "MEMORYHUB_CORES_PER_PROCESS"


def cores_per_process(workers: int) -> int:
    return max(1, (os.cpu_count() or 1) // max(1, workers))


# Set by main() for its workers: their applications settle the heap once started (settle_heap).
SETTLE_HEAP = "MEMORYHUB_SETTLE_HEAP"
YOUNG_THRESHOLD = "MEMORYHUB_GC_YOUNG_THRESHOLD"


def young_threshold() -> int:
    """MEMORYHUB_GC_YOUNG_THRESHOLD (20000): a whole number of at least 1 (0
    would stop the collector altogether), or ValueError saying what it must be."""
    try:
        value = _int(YOUNG_THRESHOLD, 20000)
    except ValueError:
        value = 0
    if value < 1:
        raise ValueError(f"{YOUNG_THRESHOLD} must be a whole number of at least 1 (new objects between two "
                         f"collections of the young generation), not {os.environ.get(YOUNG_THRESHOLD)!r}")
    return value


def settle_heap() -> bool:
    """A server worker's heap, once its application has started (the encoder
    loaded and run once, the modules and the models' metadata read): what is
    garbage collected, the rest frozen (gc.freeze), and the young generation
    collected after MEMORYHUB_GC_YOUNG_THRESHOLD new objects (20000) rather
    than Python's 700. Python's cycle collector then no longer walks the
    objects every request shares (about 146,000 of them) each time it
    collects an older generation. Measured on the search at 10k, in one
    process: the collector took 0.66-0.69 ms a search and its floor, with a
    full collection of about 100 ms every 400 of them; settled, 0.03-0.07 ms
    and none, its longest collection 5-14 ms (docs/benchmarks.md,
    "eighteenth step"). What a frozen cycle holds once it is garbage is never
    freed: the objects of the warm-up, once.

    Only in a process main() started (it sets MEMORYHUB_SETTLE_HEAP to 1
    unless it is set already; 0 leaves the collector as Python has it), so
    that an application run in a process of its own making (the test suite's
    in-process servers) leaves that process's collector as it is. True when
    it settled."""
    if os.environ.get(SETTLE_HEAP) != "1":
        return False
    young = young_threshold()
    gc.collect()
    gc.freeze()
    gc.set_threshold(young, *gc.get_threshold()[1:])
    return True


def main(argv: list[str] | None = None) -> None:
    import uvicorn

    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("app", help="module:attribute of the ASGI application")
    parser.add_argument("--host", default="127.0.0.1")
    parser.add_argument("--port", type=int, default=8000)
    parser.add_argument("--workers", type=int, default=None, help="processes (default: one per core)")
    args = parser.parse_args(argv)
    try:
        young_threshold()  # a setting its workers would fail on stops the server before it starts them
    except ValueError as error:
        parser.error(str(error))
    logging.basicConfig(level=os.environ.get("LOG_LEVEL", "INFO"))
    workers = args.workers or default_workers()
    if workers > 1 and not os.environ.get("PROMETHEUS_MULTIPROC_DIR"):
        # Each worker keeps its metrics in files here; /metrics adds them up (fresh on every start).
        os.environ["PROMETHEUS_MULTIPROC_DIR"] = tempfile.mkdtemp(prefix="memoryhub-metrics-")
    os.environ.setdefault(CORES_PER_PROCESS, str(cores_per_process(workers)))
    os.environ.setdefault(SETTLE_HEAP, "1")
    uvicorn.run(args.app, host=args.host, port=args.port, workers=workers, **server_options())


if __name__ == "__main__":
    main()
