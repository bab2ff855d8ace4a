"""Slow and oversized clients are cut off, on every path, against the real
server protocol (mcpapi.serving) and the real application.

Before: POST /o/token/ with Content-Length 1000, one byte every 5 s, was held
open as long as the client liked (the same on /mcp, and with headers only),
and a 16 MiB chunked body to /o/register/ was read to the end before the
16 KiB cap refused it. The deadlines are shortened here so the tests run in
seconds; the defaults are in mcpapi/serving.py and memoryhub/runtime/bodies.py.
"""

from __future__ import annotations

import socket
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from urllib.parse import urlsplit

import httpx2
import pytest

from mcpapi.serving import GuardedHttpToolsProtocol
from tests.conftest import poll

HEADER_SECONDS = 1.0
BODY_SECONDS = 2.0


@pytest.fixture
def server(asgi_server, monkeypatch, settings):
    monkeypatch.setattr(GuardedHttpToolsProtocol, "header_seconds", HEADER_SECONDS)
    monkeypatch.setattr(GuardedHttpToolsProtocol, "body_seconds", BODY_SECONDS)
    return asgi_server


def connect(url: str) -> socket.socket:
    parts = urlsplit(url)
    sock = socket.create_connection((parts.hostname, parts.port), timeout=30)
    return sock


def read_all(sock: socket.socket, timeout: float = 20.0) -> bytes:
    sock.settimeout(timeout)
    chunks = []
    try:
        while chunk := sock.recv(65536):
            chunks.append(chunk)
    except (ConnectionResetError, TimeoutError):
        pass
    return b"".join(chunks)


def test_a_connection_that_sends_nothing_gets_408_and_is_closed(server):
    # The server's clock starts when it accepts the connection, which may be
    # before connect() returns here: ours starts before connecting.
    started = time.monotonic()
    sock = connect(server.url)
    answer = read_all(sock)
    assert answer.startswith(b"HTTP/1.1 408"), answer[:200]
    assert HEADER_SECONDS <= time.monotonic() - started < HEADER_SECONDS + 5


def test_a_deadline_whose_timer_fires_early_still_gives_the_client_its_full_time(server):
    # The event loop's timers may fire a little early (uvloop counts from the
    # time its loop last read the clock, in whole milliseconds); here the timer
    # fires a whole second early, on the server's own loop.
    started = time.monotonic()
    sock = connect(server.url)
    connections = server.server.server_state.connections
    poll(lambda: len(connections) == 1, timeout=10, interval=0.01, what="the server to accept")
    (protocol,) = connections
    protocol.loop.call_soon_threadsafe(protocol._expired)
    answer = read_all(sock)
    assert answer.startswith(b"HTTP/1.1 408"), answer[:200]
    assert HEADER_SECONDS <= time.monotonic() - started < HEADER_SECONDS + 5


@pytest.mark.parametrize("path", ["/o/token/", "/mcp", "/memory/"])
def test_headers_that_trickle_in_get_408(server, path):
    sock = connect(server.url)
    started = time.monotonic()
    sock.sendall(f"POST {path} HTTP/1.1\r\n".encode())
    for header in (b"Host: 127.0.0.1\r\n", b"X-Slow: 1\r\n", b"X-Slow: 2\r\n", b"X-Slow: 3\r\n"):
        time.sleep(0.4)
        try:
            sock.sendall(header)
        except (BrokenPipeError, ConnectionResetError):
            break
    answer = read_all(sock)
    assert answer.startswith(b"HTTP/1.1 408"), answer[:200]
    assert time.monotonic() - started < HEADER_SECONDS + 5


@pytest.mark.parametrize("path", ["/o/token/", "/mcp", "/api/ingest/documents", "/o/register/"])
def test_a_body_that_trickles_in_gets_408(server, path):
    sock = connect(server.url)
    started = time.monotonic()
    sock.sendall(f"POST {path} HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/x-www-form-urlencoded\r\n"
                 f"Authorization: Bearer not-checked-before-the-body-arrives\r\n"
                 f"Content-Length: 1000\r\n\r\n".encode())
    for _ in range(20):
        time.sleep(0.5)
        try:
            sock.sendall(b"a")
        except (BrokenPipeError, ConnectionResetError):
            break
    answer = read_all(sock)
    elapsed = time.monotonic() - started
    # Refused without waiting for the rest: a 408, or (a 401 before any body is read at /mcp) never a wait.
    assert answer.split(b" ")[1] in (b"408", b"401"), answer[:300]
    assert elapsed < BODY_SECONDS + 5


def test_a_declared_length_over_the_cap_is_refused_before_the_body(server):
    sock = connect(server.url)
    sock.sendall(b"POST /api/ingest/documents HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\n"
                 b"Content-Length: 10485760\r\n\r\n")
    answer = read_all(sock)
    assert answer.startswith(b"HTTP/1.1 413"), answer[:300]


def test_a_chunked_body_is_refused_as_soon_as_it_passes_the_cap(server):
    """16 MiB of chunks to the 16 KiB registration endpoint: 413 after little more than the cap."""
    sock = connect(server.url)
    sock.sendall(b"POST /o/register/ HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\n"
                 b"Transfer-Encoding: chunked\r\n\r\n")
    chunk = b"x" * 8192
    sent = 0
    answer = b""
    sock.settimeout(0.05)
    while sent < 16 * 1024 * 1024:
        try:
            sock.sendall(b"%x\r\n%s\r\n" % (len(chunk), chunk))
        except (BrokenPipeError, ConnectionResetError):
            break
        sent += len(chunk)
        try:
            answer += sock.recv(65536)
        except TimeoutError:
            continue
        if answer:
            break
    answer += read_all(sock, timeout=10)
    assert answer.startswith(b"HTTP/1.1 413"), answer[:300]
    assert sent < 4 * 1024 * 1024, f"{sent} bytes were taken before the refusal"


def test_fifty_slow_clients_do_not_stop_a_normal_client(server):
    stop = threading.Event()

    def slow_client() -> None:
        while not stop.is_set():
            try:
                sock = connect(server.url)
                sock.sendall(b"POST /o/token/ HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Length: 1000\r\n\r\n")
                while not stop.is_set():
                    time.sleep(0.3)
                    sock.sendall(b"a")
            except OSError:
                continue  # cut off: come back, as an attacker would

    with ThreadPoolExecutor(50) as pool:
        for _ in range(50):
            pool.submit(slow_client)
        time.sleep(1.0)
        try:
            latencies = []
            for _ in range(20):
                started = time.monotonic()
                response = httpx2.get(f"{server.url}/healthz", timeout=10, trust_env=False)
                latencies.append(time.monotonic() - started)
                assert response.status_code == 200
                time.sleep(0.1)
        finally:
            stop.set()
    # Answers came while the slow connections were open (no timed bound: speed lives in bench/).
    assert len(latencies) == 20


def test_a_tool_call_whose_body_never_finishes_is_never_run(server, live_people):
    """A complete JSON-RPC write sent chunked without its last chunk: the client
    gets its 408 and the write does not happen afterwards behind its back."""
    import json as _json
    from datetime import timedelta

    from django.utils import timezone
    from oauth2_provider.models import AccessToken, Application, set_token_value

    from memoryhub.models import Fragment, IdempotencyRecord
    from tests.mcpapi.rpc_http import modern_headers, modern_request

    application = Application.objects.create(
        name="slow", client_type=Application.CLIENT_PUBLIC,
        authorization_grant_type=Application.GRANT_AUTHORIZATION_CODE, redirect_uris="http://127.0.0.1:9/cb")
    raw = "slow-writer-token-" + "x" * 12
    token = AccessToken(application=application, user=live_people.bruno, scope="memory.read memory.write",
                        resource=[f"{server.url}/mcp"], expires=timezone.now() + timedelta(minutes=15))
    set_token_value(token, raw)
    token.save()
    body = _json.dumps(modern_request("tools/call", {"name": "memory_write",
                                                     "arguments": {"content": "Never finished."}})).encode()
    headers = {**modern_headers("tools/call", "memory_write", raw), "Host": "127.0.0.1",
               "Transfer-Encoding": "chunked"}
    sock = connect(server.url)
    sock.sendall(b"POST /mcp HTTP/1.1\r\n" + b"".join(f"{k}: {v}\r\n".encode() for k, v in headers.items())
                 + b"\r\n" + b"%x\r\n%s\r\n" % (len(body), body))
    answer = read_all(sock)
    assert answer.startswith(b"HTTP/1.1 408"), answer[:300]
    time.sleep(1.0)
    assert not Fragment.objects.filter(owner_user=live_people.bruno).exists()
    assert not IdempotencyRecord.objects.exists()


@pytest.mark.parametrize("method", [b"OPTIONS", b"POST", b"HEAD"])
def test_the_asterisk_form_is_answered_not_crashed_on(server, method):
    # "OPTIONS * HTTP/1.1" is a valid request line; its target matched no body cap (a 500).
    sock = connect(server.url)
    sock.sendall(method + b" * HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Length: 0\r\nConnection: close\r\n\r\n")
    answer = read_all(sock)
    assert answer.startswith(b"HTTP/1.1 "), answer[:200]
    assert int(answer[9:12]) < 500, answer[:300]


def request_with(headers: list[bytes], target: bytes = b"/healthz") -> bytes:
    return (b"GET " + target + b" HTTP/1.1\r\nHost: 127.0.0.1\r\n" + b"".join(h + b"\r\n" for h in headers)
            + b"Connection: close\r\n\r\n")


def test_headers_past_the_limit_get_431_before_the_application(server):
    from mcpapi.serving import HEADER_BYTES_MAX, HEADER_FIELDS_MAX

    # At the limits (the Host and Connection fields count too): answered.
    at_limit = [b"X-Field-%d: v" % number for number in range(HEADER_FIELDS_MAX - 2)]
    sock = connect(server.url)
    sock.sendall(request_with(at_limit))
    assert read_all(sock).startswith(b"HTTP/1.1 200"), "a request at the limits is served"
    big = b"X-Big: " + b"a" * (HEADER_BYTES_MAX - 200)
    sock = connect(server.url)
    sock.sendall(request_with([big]))
    assert read_all(sock).startswith(b"HTTP/1.1 200"), "a request just under the byte limit is served"
    # One past: one field too many, one header too large, a request line too long.
    for request in (request_with([*at_limit, b"X-One-More: v"]), request_with([big + b"a" * 400]),
                    request_with([], b"/healthz?" + b"a" * HEADER_BYTES_MAX)):
        sock = connect(server.url)
        sock.sendall(request)
        answer = read_all(sock)
        assert answer.startswith(b"HTTP/1.1 431"), answer[:200]
        assert b"too large" in answer
