"""memory_search over MCP end to end, beside the same search called in the memory service.

    python bench/bench_mcp.py                                  # 10k and 100k, 200 queries, concurrency 8
    python bench/bench_mcp.py --sizes 10000 --queries 100 --conn-max-age 0 --no-append

For each corpus of bench/search_bench.py (10k and 100k fragments in one workspace, 20 roles,
50 collections, 50 readers; built when missing, which takes a while the first time):

* service: `memory_search(caller=…, query=…)` called in this process, the memory core's own number
  (query embedding, both index queries under the visibility predicate, row check, fusion, receipt);
* MCP: `tools/call memory_search` at revision 2026-07-28 over HTTP to a uvicorn process serving
  `memoryhub.asgi` (the single-process deployment): the gateway (Origin, size, bearer token checked
  in the database, rate limit in Redis), the SDK, argument validation, the in-process client, the
  same search and receipt, the JSON answer. Each reader has an access token of their own. The
  server runs once per --conn-max-age value (default 0 and 60): 0, the shipped default, opens a
  database connection per request; 60 keeps one per worker thread.

Both paths run the same queries with the same readers: first one at a time (p50 / p95), then with
8 clients at once for a fixed number of requests (requests/s, and p50 / p95 under that load). The
service's concurrent run uses 8 threads in this process, each with its own database connection.
The MCP clients are 8 threads in this process with keep-alive connections, so client and server
share the machine's cores, as they do in the service run. Rate limits are lifted for the run.

Results: bench/results/mcp_bench.json, and (unless --no-append) the section in docs/benchmarks.md
is replaced or added.
"""

from __future__ import annotations

import argparse
import datetime as dt
import json
import os
import platform
import random
import secrets
import statistics
import sys
import tempfile
import threading
import time
from collections.abc import Callable
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from bench_edge import database_url, free_port, process  # noqa: E402
from common import ROOT, bench_database, percentile, replace_section, summary, write_results  # noqa: E402
from search_bench import DATA, Corpus, build, slug  # noqa: E402

MODERN = "2026-07-28"
SECTION = "## MCP end to end: memory_search over HTTP"


def tokens_for(size: int, base_url: str) -> list[tuple[object, str]]:
    """(caller, raw access token for base_url/mcp) for every reader of the corpus."""
    from datetime import timedelta

    from django.utils import timezone
    from oauth2_provider.models import AccessToken, Application, set_token_value

    from memoryhub.access import caller_for_user
    from memoryhub.models import User

    app, _ = Application.objects.get_or_create(
        name="MCP bench", defaults={
            "client_type": Application.CLIENT_PUBLIC, "authorization_grant_type": Application.GRANT_AUTHORIZATION_CODE,
            "redirect_uris": "http://127.0.0.1:9/cb", "client_secret": "", "hash_client_secret": False,
        },
    )
    readers = []
    for user in User.objects.filter(tenant__slug=slug(size)).order_by("pk"):
        raw = secrets.token_urlsafe(24)
        token = AccessToken(application=app, user=user, scope="memory.read", resource=[f"{base_url}/mcp"],
                            expires=timezone.now() + timedelta(hours=3))
        set_token_value(token, raw)
        token.save()
        readers.append((caller_for_user(user=user, client_id=app.client_id), raw))
    return readers


def mcp_call(http, url: str, token: str, query: str) -> None:
    body = json.dumps({
        "jsonrpc": "2.0", "id": 1, "method": "tools/call",
        "params": {"name": "memory_search", "arguments": {"query": query}, "_meta": {
            "io.modelcontextprotocol/protocolVersion": MODERN,
            "io.modelcontextprotocol/clientCapabilities": {},
            "io.modelcontextprotocol/clientInfo": {"name": "bench-mcp", "version": "0"},
        }},
    }).encode()
    answer = http.post(url, content=body, headers={
        "Content-Type": "application/json", "Accept": "application/json, text/event-stream",
        "MCP-Protocol-Version": MODERN, "Mcp-Method": "tools/call", "Mcp-Name": "memory_search",
        "Authorization": f"Bearer {token}",
    })
    payload = answer.json()
    if answer.status_code != 200 or payload.get("result", {}).get("isError"):
        raise RuntimeError(f"memory_search over MCP: {answer.status_code} {answer.text[:300]}")
    if not payload["result"]["structuredContent"]["receipt_id"]:
        raise RuntimeError("no receipt")


def sequential(call: Callable[[int], None], n: int) -> dict:
    samples = []
    for i in range(n):
        started = time.perf_counter()
        call(i)
        samples.append((time.perf_counter() - started) * 1000)
    return summary(samples)


def concurrent(make_worker: Callable[[], Callable[[int], None]], n: int, clients: int) -> dict:
    """`n` calls shared by `clients` threads; each thread gets its own `make_worker()`."""
    samples: list[float] = []
    failures: list[BaseException] = []
    lock = threading.Lock()
    counter = iter(range(n))
    barrier = threading.Barrier(clients + 1)

    def run() -> None:
        work = make_worker()
        barrier.wait()
        while True:
            with lock:
                i = next(counter, None)
            if i is None:
                return
            started = time.perf_counter()
            try:
                work(i)
            except BaseException as exc:  # noqa: BLE001
                failures.append(exc)
                return
            elapsed = (time.perf_counter() - started) * 1000
            with lock:
                samples.append(elapsed)

    threads = [threading.Thread(target=run) for _ in range(clients)]
    for thread in threads:
        thread.start()
    barrier.wait()
    started = time.perf_counter()
    for thread in threads:
        thread.join()
    seconds = time.perf_counter() - started
    if failures:
        raise RuntimeError(f"{len(failures)} calls failed") from failures[0]
    return {
        "clients": clients, "n": len(samples), "seconds": round(seconds, 2),
        "requests_per_s": round(len(samples) / seconds, 1),
        "p50_ms": round(statistics.median(samples), 2), "p95_ms": round(percentile(samples, 95), 2),
    }


def measure(size: int, queries: list[str], args: argparse.Namespace) -> dict:
    from django.db import connection

    from memoryhub.services.search import memory_search

    port = free_port()
    base_url = f"http://127.0.0.1:{port}"
    readers = tokens_for(size, base_url)
    rng = random.Random(size)
    plan = [(query, rng.choice(readers)) for query in queries]
    prefix = f"bench-mcp-{secrets.token_hex(4)}"
    env = {
        **os.environ,
        "DJANGO_SETTINGS_MODULE": "memoryhub.settings",
        "DATABASE_URL": database_url(connection.settings_dict),
        "MEMORYHUB_BASE_URL": base_url,
        "MEMORYHUB_RATE_PER_MINUTE": "100000000", "MEMORYHUB_RATE_BURST": "100000000",
        "MEMORYHUB_CACHE_PREFIX": prefix, "MEMORYHUB_TASK_QUEUE": prefix,
        "LOG_LEVEL": "WARNING",
    }
    result: dict = {"fragments": size, "queries": len(queries), "clients": args.concurrency}

    def service(i: int) -> None:
        query, (caller, _) = plan[i % len(plan)]
        memory_search(caller=caller, query=query)

    def service_worker() -> Callable[[int], None]:
        return service  # each thread opens its own database connection on first use

    for i in range(min(10, len(plan))):  # warm the embedder, caches and the connection
        service(i)
    result["service"] = sequential(service, len(plan))
    result["service_concurrent"] = concurrent(service_worker, len(plan) * args.rounds, args.concurrency)
    connection.close()

    result["mcp"] = {}
    for age in args.conn_max_age:
        env["DATABASE_CONN_MAX_AGE"] = str(age)
        result["mcp"][str(age)] = mcp_run(base_url, port, env, plan, args)
        one, service_one = result["mcp"][str(age)]["one_at_a_time"], result["service"]
        result["mcp"][str(age)]["overhead"] = {
            "p50_ratio": round(one["p50_ms"] / service_one["p50_ms"], 2),
            "p50_added_ms": round(one["p50_ms"] - service_one["p50_ms"], 1),
            "throughput_ratio": round(result["mcp"][str(age)]["concurrent"]["requests_per_s"]
                                      / result["service_concurrent"]["requests_per_s"], 2),
        }
    return result


def mcp_run(base_url: str, port: int, env: dict[str, str], plan: list, args: argparse.Namespace) -> dict:
    """The MCP numbers against a fresh server process started with `env`."""
    import httpx2

    url = f"{base_url}/mcp"
    result: dict = {}
    with process("memoryhub", "memoryhub.asgi:application", port, env, Path(tempfile.mkdtemp(prefix="bench-mcp-"))):
        with httpx2.Client(timeout=120, trust_env=False) as http:
            def mcp(i: int) -> None:
                query, (_, token) = plan[i % len(plan)]
                mcp_call(http, url, token, query)

            for i in range(min(10, len(plan))):
                mcp(i)
            result["one_at_a_time"] = sequential(mcp, len(plan))

        clients: list = []

        def mcp_worker() -> Callable[[int], None]:
            http = httpx2.Client(timeout=120, trust_env=False)
            clients.append(http)
            return lambda i: mcp_call(http, url, plan[i % len(plan)][1][1], plan[i % len(plan)][0])

        try:
            result["concurrent"] = concurrent(mcp_worker, len(plan) * args.rounds, args.concurrency)
        finally:
            for http in clients:
                http.close()
    return result


def markdown(results: dict) -> str:
    rows = []
    for size, r in results["sizes"].items():
        s, sc = r["service"], r["service_concurrent"]
        for age, m in r["mcp"].items():
            one, many, o = m["one_at_a_time"], m["concurrent"], m["overhead"]
            rows.append(
                f"| {int(size):,} | {age} | {s['p50_ms']} / {s['p95_ms']} | {one['p50_ms']} / {one['p95_ms']} | "
                f"{o['p50_ratio']}× (+{o['p50_added_ms']} ms) | {sc['requests_per_s']} ({sc['p50_ms']} / "
                f"{sc['p95_ms']}) | {many['requests_per_s']} ({many['p50_ms']} / {many['p95_ms']}) | "
                f"{o['throughput_ratio']} |"
            )
    return (
        f"{SECTION} ({results['date']})\n\n"
        f"`memory_search` called in the memory service (this process) against the same call over MCP "
        f"(`tools/call` at revision {MODERN}, HTTP keep-alive, a bearer token per reader, one uvicorn process "
        f"serving `memoryhub.asgi`), same queries and readers, on search_bench's corpora (20 roles, 50 "
        f"collections, 50 readers); {results['queries']} queries one at a time, then {results['rounds']}× as many "
        f"with {results['clients']} clients at once. {results['machine']}; embedded PostgreSQL 16; the server "
        "started once per `DATABASE_CONN_MAX_AGE` (0 is the shipped default: a connection per request); "
        f"1-minute load average {results['load_average_before']} when it started. Latencies in ms, p50 / p95.\n\n"
        "| fragments | server's CONN_MAX_AGE | service, one at a time | MCP, one at a time | MCP overhead p50 | "
        f"service req/s at {results['clients']} (p50 / p95) | MCP req/s at {results['clients']} (p50 / p95) "
        "| MCP / service throughput |\n"
        "|---|---|---|---|---|---|---|---|\n" + "\n".join(rows) + "\n\n"
        "What the MCP path adds per request: HTTP parsing, the gateway's checks, the token lookup (one indexed "
        "query, plus the membership check), the rate limit (one Redis script), the SDK's JSON-RPC handling "
        "and output validation, a thread hop into the synchronous domain, and, with the shipped "
        "`DATABASE_CONN_MAX_AGE=0`, a new database connection per request (the service run reuses its "
        "connection). The two CONN_MAX_AGE rows isolate that last cost: the token check and the tool call each "
        "run in a worker thread, so each opens a connection of its own when connections are not kept. Django "
        "advises against persistent connections under ASGI (use the driver's pool instead); the 60 s rows show "
        "what a pool would save. Under load, the 8 MCP clients and the server share the same cores.\n\n"
        "Rerun: `python bench/bench_mcp.py [--sizes 10000,100000] [--queries 200] [--concurrency 8] "
        "[--conn-max-age 0,60] [--no-append]` (benchmark database `memoryhub_bench`; writes "
        "`bench/results/mcp_bench.json` and replaces this section).\n"
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--sizes", default="10000,100000")
    parser.add_argument("--queries", type=int, default=200, help="queries per size, one at a time")
    parser.add_argument("--rounds", type=int, default=2, help="concurrent run: this many times the queries")
    parser.add_argument("--concurrency", type=int, default=8)
    parser.add_argument("--conn-max-age", default="0,60", type=lambda text: [int(x) for x in text.split(",")],
                        help="DATABASE_CONN_MAX_AGE values to run the server with (0 is the shipped default)")
    parser.add_argument("--no-append", action="store_true", help="leave docs/benchmarks.md alone")
    args = parser.parse_args()

    data = json.loads(DATA.read_text())
    seeds = [item["value"] for item in data["fragments"]]
    results: dict = {
        "queries": args.queries, "rounds": args.rounds, "clients": args.concurrency,
        "machine": f"{platform.machine()}, {os.cpu_count()} CPUs, Python {platform.python_version()}",
        "date": dt.date.today().isoformat(), "load_average_before": round(os.getloadavg()[0], 1), "sizes": {},
    }
    with bench_database():
        corpus = Corpus(seeds)
        for size in [int(s) for s in args.sizes.split(",")]:
            build(size, corpus, rebuild=False)
            rng = random.Random(7)
            queries = [q["query"] for q in rng.sample(data["queries"], min(args.queries, len(data["queries"])))]
            results["sizes"][str(size)] = measure(size, queries, args)
            print(json.dumps(results["sizes"][str(size)], indent=1), flush=True)
    path = write_results("mcp_bench", results)
    section = markdown(results)
    print(section)
    print(f"(raw numbers: {path.relative_to(ROOT)})")
    if not args.no_append:
        docs = ROOT / "docs" / "benchmarks.md"
        docs.write_text(replace_section(docs.read_text(), SECTION, section))


if __name__ == "__main__":
    main()
