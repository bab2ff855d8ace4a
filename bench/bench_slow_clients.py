"""Normal clients' latency with and without 50 slow clients holding connections.

A slow client sends a token request's headers and then one body byte every
0.5 s (the server cuts it off at its body deadline, and it comes straight
back, as an attacker would). Meanwhile a normal client asks /healthz, signs in
page and the MCP whoami, one request at a time. Measured against the real
server (`python -m mcpapi.serving`, one worker) on the benchmark database.

    python bench/bench_slow_clients.py [--seconds 30] [--slow 50] [--no-docs]
"""

from __future__ import annotations

import argparse
import os
import socket
import subprocess
import sys
import threading
import time

from common import ROOT, free_port, publish, summary

from memoryhub.runtime.children import stop_child

HEADING = "## Slow clients"


def slow_client(port: int, stop: threading.Event, cut_off: list[int]) -> None:
    while not stop.is_set():
        try:
            sock = socket.create_connection(("127.0.0.1", port), timeout=60)
            sock.sendall(b"POST /o/token/ HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Length: 1000\r\n\r\n")
            while not stop.is_set():
                time.sleep(0.5)
                sock.sendall(b"a")
        except OSError:
            cut_off.append(1)


def normal_client(url: str, seconds: float) -> list[float]:
    import httpx2

    samples = []
    deadline = time.monotonic() + seconds
    with httpx2.Client(timeout=30, trust_env=False) as http:
        while time.monotonic() < deadline:
            started = time.perf_counter()
            response = http.get(f"{url}/healthz")
            samples.append((time.perf_counter() - started) * 1000)
            assert response.status_code == 200
            started = time.perf_counter()
            http.get(f"{url}/accounts/login/")
            samples.append((time.perf_counter() - started) * 1000)
    return samples


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seconds", type=float, default=30.0)
    parser.add_argument("--slow", type=int, default=50)
    parser.add_argument("--no-docs", action="store_true")
    args = parser.parse_args()

    import httpx2

    port = free_port()
    url = f"http://127.0.0.1:{port}"
    env = {**os.environ, "MEMORYHUB_BASE_URL": url, "LOG_LEVEL": "WARNING"}
    env.pop("PROMETHEUS_MULTIPROC_DIR", None)
    server = subprocess.Popen([sys.executable, "-m", "mcpapi.serving", "memoryhub.asgi:application", "--port",
                               str(port), "--workers", "1"], cwd=ROOT, env=env, stdout=subprocess.DEVNULL,
                              stderr=subprocess.DEVNULL)
    try:
        for _ in range(600):
            try:
                if httpx2.get(f"{url}/healthz", timeout=2, trust_env=False).status_code == 200:
                    break
            except httpx2.HTTPError:
                time.sleep(0.2)
        alone = normal_client(url, args.seconds)
        stop, cut_off = threading.Event(), []
        threads = [threading.Thread(target=slow_client, args=(port, stop, cut_off), daemon=True)
                   for _ in range(args.slow)]
        for thread in threads:
            thread.start()
        time.sleep(2)
        besieged = normal_client(url, args.seconds)
        stop.set()
    finally:
        stop_child(server)
    results = {"alone": summary(alone), "with_slow_clients": summary(besieged), "slow_clients": args.slow,
               "slow_connections_cut_off": len(cut_off), "seconds": args.seconds}
    section = f"""{HEADING}

`python bench/bench_slow_clients.py --seconds {args.seconds:g} --slow {args.slow}`: a normal client alternates
`/healthz` and the sign-in page, one request at a time, against `mcpapi.serving` (one worker), first alone,
then while {args.slow} slow clients each hold a connection sending a token request's body one byte every
0.5 s (cut off at the 30 s body deadline, they reconnect at once). Milliseconds.

| normal client | p50 | p95 | requests |
|---|---|---|---|
| alone | {results['alone']['p50_ms']} | {results['alone']['p95_ms']} | {results['alone']['n']} |
| beside {args.slow} slow clients | {results['with_slow_clients']['p50_ms']} | \
{results['with_slow_clients']['p95_ms']} | {results['with_slow_clients']['n']} |

Slow connections cut off during the run: {len(cut_off)}. A slow client costs a file descriptor and a
timer, not a worker: the server reads each request's body before the application sees it, under the
deadlines of `mcpapi/serving.py` and the size caps of `memoryhub/runtime/bodies.py`.
"""
    publish("slow_clients", results, HEADING, section, to_docs=not args.no_docs)


if __name__ == "__main__":
    main()
