"""What the edge topology's extra hop costs per MCP request.

    python bench/bench_edge.py [--n 200] [--no-append]

Starts, on 127.0.0.1, one memory-service process (uvicorn memoryhub.asgi, on the
benchmark database, internal API on) and one edge process (uvicorn
mcpapi.edge_app, environment without DATABASE_URL / SECRET_KEY /
DJANGO_SETTINGS_MODULE, pointed at the service). The same token makes the same
call, alternating between

* single process: POST <service>/mcp (gateway + in-process client, token checked in the database);
* edge:           POST <edge>/mcp    (gateway, token exchange at the service, internal API call);

and reports p50/p95 per call, the difference, and the exchange request alone.
Raw JSON-RPC at revision 2026-07-28 over a keep-alive connection, so client-side
cost is the same on both paths. Rate limits are lifted for the run.

Results go to bench/results/edge_<db mode>.json and (unless --no-append) its section in
docs/benchmarks.md is replaced or added.
"""

from __future__ import annotations

import argparse
import datetime as dt
import json
import os
import platform
import secrets
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from urllib.parse import quote, urlencode

sys.path.insert(0, str(Path(__file__).resolve().parent))

from common import DB_MODES, ROOT, bench_database, free_port, publish, summary  # noqa: E402

from memoryhub.runtime.children import stop_child  # noqa: E402

MODERN = "2026-07-28"
SECTION = "## Edge topology: the cost of the exchange hop"
FACTS = [
    "The staging cluster in Frankfurt is rebuilt every Sunday at 02:00 UTC.",
    "Production database backups run nightly and are kept for 35 days.",
    "The on-call rota changes on Monday mornings at 09:00 local time.",
    "Release trains leave every second Wednesday; hotfixes go out any day.",
    "The search service times out after 20 seconds and says so in the result.",
    "Customer exports are generated as CSV and expire after seven days.",
    "Feature flags are cleaned up at the end of every quarter.",
    "Load tests run against staging only, never against production.",
]


def database_url(settings_dict: dict) -> str:
    query = {"host": settings_dict["HOST"]} if settings_dict["HOST"] else {}
    if settings_dict.get("PORT"):
        query["port"] = str(settings_dict["PORT"])
    password = f":{quote(settings_dict['PASSWORD'], safe='')}" if settings_dict.get("PASSWORD") else ""
    return (f"postgresql://{quote(settings_dict['USER'] or '', safe='')}{password}@/"
            f"{quote(settings_dict['NAME'], safe='')}?{urlencode(query)}")


# Benchmarks measure latency, not the per-principal limit.
LIFTED_RATE_LIMIT = {"MEMORYHUB_RATE_PER_MINUTE": "100000000", "MEMORYHUB_RATE_BURST": "100000000"}


def service_env(base_url: str, prefix: str, **extra: str) -> dict[str, str]:
    """The environment of a memory service a benchmark starts: on the benchmark
    database (this process's connection), answering as `base_url`, its rate
    limit lifted, its cache keys and task queue under `prefix`; `extra` last."""
    from django.db import connection

    return {
        **os.environ, **LIFTED_RATE_LIMIT,
        "DJANGO_SETTINGS_MODULE": "memoryhub.settings",
        "DATABASE_URL": database_url(connection.settings_dict),
        "MEMORYHUB_BASE_URL": base_url,
        "MEMORYHUB_CACHE_PREFIX": prefix, "MEMORYHUB_TASK_QUEUE": prefix,
        "LOG_LEVEL": "WARNING",
        **extra,
    }


@contextmanager
def process(name: str, target: str, port: int, env: dict[str, str], logs: Path, *,
            workers: int | None = None, root: Path = ROOT) -> Iterator[str]:
    """`target` served on `port`: by one plain uvicorn process, or with `workers`
    by the product's own server (mcpapi.serving, uvicorn with that many worker
    processes, 0 for its default of one per core), the way it is deployed;
    from the checkout at `root` (this one unless named: its code is what runs)."""
    import httpx2

    url = f"http://127.0.0.1:{port}"
    log = logs / f"{name}.log"
    if workers is None:
        command = ["-m", "uvicorn", target, "--host", "127.0.0.1", "--port", str(port),
                   "--lifespan", "on", "--log-level", "warning", "--no-access-log"]
    else:
        command = ["-m", "mcpapi.serving", target, "--host", "127.0.0.1", "--port", str(port),
                   *(["--workers", str(workers)] if workers else [])]
    with open(log, "wb") as out:
        popen = subprocess.Popen([sys.executable, *command], cwd=root, env=env, stdout=out, stderr=subprocess.STDOUT,
                                 start_new_session=workers is not None)
    try:
        deadline = time.monotonic() + 180
        while True:
            if popen.poll() is not None or time.monotonic() > deadline:
                raise RuntimeError(f"{name} did not start:\n{log.read_text()[-3000:]}")
            try:
                if httpx2.get(f"{url}/healthz", timeout=2, trust_env=False).status_code == 200:
                    break
            except httpx2.HTTPError:
                time.sleep(0.1)
        yield url
    finally:
        stop_child(popen, grace=20, group=workers is not None)


def seed(edge_url: str) -> str:
    """A person in a workspace of their own, some private memory, and a token for the edge's /mcp."""
    from datetime import timedelta

    from django.utils import timezone
    from oauth2_provider.models import AccessToken, Application, set_token_value

    from memoryhub.access import OPERATOR, caller_for_user, system_caller
    from memoryhub.services.fragments import fragment_write
    from memoryhub.services.members import member_add
    from memoryhub.services.roles import role_create
    from memoryhub.services.workspaces import workspace_create

    run = secrets.token_hex(4)
    tenant = workspace_create(caller=OPERATOR, slug=f"edge-bench-{run}", name="Edge bench")
    system = system_caller(tenant=tenant)
    role_create(caller=system, name="engineering")
    person = member_add(caller=system, username=f"bench-{run}", password=None, roles=["engineering"])
    app = Application.objects.create(
        name="Edge bench", client_type=Application.CLIENT_PUBLIC,
        authorization_grant_type=Application.GRANT_AUTHORIZATION_CODE, redirect_uris="http://127.0.0.1:9/cb",
        client_secret="", hash_client_secret=False,
    )
    caller = caller_for_user(user=person, client_id=app.client_id)
    for fact in FACTS:
        fragment_write(caller=caller, content=fact)
    raw = secrets.token_urlsafe(24)
    token = AccessToken(application=app, user=person, scope="memory.read memory.write memory.audit",
                        resource=[f"{edge_url}/mcp"], expires=timezone.now() + timedelta(hours=2))
    set_token_value(token, raw)
    token.save()
    return raw


def rpc(http, url: str, token: str, name: str, arguments: dict) -> Callable[[], object]:
    body = json.dumps({
        "jsonrpc": "2.0", "id": 1, "method": "tools/call",
        "params": {"name": name, "arguments": arguments, "_meta": {
            "io.modelcontextprotocol/protocolVersion": MODERN,
            "io.modelcontextprotocol/clientCapabilities": {},
            "io.modelcontextprotocol/clientInfo": {"name": "bench-edge", "version": "0"},
        }},
    }).encode()
    headers = {"Content-Type": "application/json", "Accept": "application/json, text/event-stream",
               "MCP-Protocol-Version": MODERN, "Mcp-Method": "tools/call", "Mcp-Name": name,
               "Authorization": f"Bearer {token}"}

    def once() -> object:
        answer = http.post(url, content=body, headers=headers)
        payload = answer.json()
        if answer.status_code != 200 or payload.get("result", {}).get("isError"):
            raise RuntimeError(f"{name} at {url}: {answer.status_code} {answer.text[:300]}")
        return payload

    return once


def alternate(a: Callable[[], object], b: Callable[[], object], n: int, warmup: int) -> tuple[list, list]:
    """Milliseconds per call for a and b, interleaved so both see the same machine."""
    for _ in range(warmup):
        a()
        b()
    first: list[float] = []
    second: list[float] = []
    for i in range(n):
        for fn, samples in ((a, first), (b, second)) if i % 2 == 0 else ((b, second), (a, first)):
            started = time.perf_counter()
            fn()
            samples.append((time.perf_counter() - started) * 1000)
    return first, second


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--n", type=int, default=200, help="calls per path and tool")
    parser.add_argument("--warmup", type=int, default=10)
    parser.add_argument("--db-mode", default="pool", choices=sorted(DB_MODES),
                        help="how the memory service gets database connections (default pool, the shipped one)")
    parser.add_argument("--no-append", action="store_true", help="do not append to docs/benchmarks.md")
    args = parser.parse_args()

    import httpx2

    results: dict = {
        "n": args.n,
        "db_mode": args.db_mode,
        "machine": f"{platform.machine()}, {os.cpu_count()} CPUs, Python {platform.python_version()}",
        "date": dt.date.today().isoformat(),
        "load_average_before": round(os.getloadavg()[0], 1),
    }
    with bench_database():
        from django.db import connection

        edge_port, service_port = free_port(), free_port()
        edge_url = f"http://127.0.0.1:{edge_port}"
        token = seed(edge_url)
        prefix = f"bench-edge-{secrets.token_hex(4)}"
        memory_service_env = service_env(edge_url, prefix, MEMORYHUB_INTERNAL_API="1", **DB_MODES[args.db_mode])
        edge_env = {
            "PATH": os.environ.get("PATH", ""), "HOME": os.environ.get("HOME", "/root"), "PYTHONPATH": str(ROOT),
            "REDIS_URL": os.environ.get("REDIS_URL") or "redis://127.0.0.1:6379/0", **LIFTED_RATE_LIMIT,
            "MEMORYHUB_CACHE_PREFIX": prefix,
            "MEMORYHUB_BASE_URL": edge_url, "MEMORYHUB_SERVICE_URL": f"http://127.0.0.1:{service_port}",
        }
        connection.close()
        logs = Path(tempfile.mkdtemp(prefix="bench-edge-"))
        with (
            process("memory-service", "memoryhub.asgi:application", service_port, memory_service_env, logs) as service,
            process("edge", "mcpapi.edge_app:application", edge_port, edge_env, logs) as edge,
            httpx2.Client(timeout=60, trust_env=False) as http,
        ):
            calls = {
                "whoami": {},
                "memory_search": {"query": "When is the staging cluster rebuilt?", "limit": 5},
            }
            for name, arguments in calls.items():
                single, edged = alternate(
                    rpc(http, f"{service}/mcp", token, name, arguments),
                    rpc(http, f"{edge}/mcp", token, name, arguments),
                    args.n, args.warmup,
                )
                results[name] = {"single_process": summary(single), "edge": summary(edged)}
                results[name]["added_ms"] = {
                    key: round(results[name]["edge"][key] - results[name]["single_process"][key], 2)
                    for key in ("p50_ms", "p95_ms")
                }
            exchange_form = {
                "grant_type": "urn:ietf:params:oauth:grant-type:token-exchange", "subject_token": token,
                "subject_token_type": "urn:ietf:params:oauth:token-type:access_token",
                "resource": f"{edge_url}/mcp", "audience": f"{edge_url}/internal/memory",
            }

            def exchange_once() -> object:
                answer = http.post(f"{service}/o/token/exchange/", data=exchange_form)
                if answer.status_code != 200:
                    raise RuntimeError(answer.text)
                return answer

            for _ in range(args.warmup):
                exchange_once()
            samples = []
            for _ in range(args.n):
                started = time.perf_counter()
                exchange_once()
                samples.append((time.perf_counter() - started) * 1000)
            results["token_exchange_alone"] = summary(samples)
        _forget(prefix)

    publish(f"edge_{args.db_mode}", results, SECTION, markdown(results), to_docs=not args.no_append)


def _forget(prefix: str) -> None:
    import redis

    client = redis.Redis.from_url(os.environ.get("REDIS_URL") or "redis://127.0.0.1:6379/0")
    try:
        for key in client.scan_iter(f"*{prefix}*"):
            client.delete(key)
        client.delete(prefix)
    finally:
        client.close()


def markdown(results: dict) -> str:
    rows = []
    for name in ("whoami", "memory_search"):
        r = results[name]
        rows.append(
            f"| `{name}` | {r['single_process']['p50_ms']} / {r['single_process']['p95_ms']} "
            f"| {r['edge']['p50_ms']} / {r['edge']['p95_ms']} "
            f"| {r['added_ms']['p50_ms']:+} / {r['added_ms']['p95_ms']:+} |"
        )
    exchange = results["token_exchange_alone"]
    return (
        f"{SECTION} ({results['date']})\n\n"
        f"One MCP `tools/call` (revision {MODERN}, keep-alive, same token), single process "
        f"(`memoryhub.asgi` answering `/mcp` itself) against edge (`mcpapi.edge_app` → token exchange → "
        f"internal API on the same `memoryhub.asgi` process), calls interleaved, n = {results['n']} per "
        f"cell, on {results['machine']}; everything on 127.0.0.1, embedded PostgreSQL 16, "
        f"database connections `{results['db_mode']}` (bench/common.py) on the memory service; 1-minute load average "
        f"{results['load_average_before']} when it started.\n\n"
        "| call | single process p50 / p95 ms | edge p50 / p95 ms | added by the edge p50 / p95 ms |\n"
        "|---|---|---|---|\n" + "\n".join(rows) + "\n\n"
        f"The token exchange request alone (HTTP + Django + verify the caller's token, store the credential): "
        f"p50 {exchange['p50_ms']} ms, p95 {exchange['p95_ms']} ms. The edge adds two HTTP requests to the "
        "memory service (the exchange, then the internal call, which looks the credential up); across a real "
        "network add two round trips.\n\n"
        "Rerun: `python bench/bench_edge.py [--n 200] [--db-mode pool] [--no-append]` "
        "(uses the benchmark database "
        "`memoryhub_bench` on the embedded PostgreSQL unless DATABASE_URL is set; writes "
        "`bench/results/edge_<db mode>.json` and replaces this section).\n"
    )


if __name__ == "__main__":
    main()
