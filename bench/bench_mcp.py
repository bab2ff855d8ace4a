"""memory_search over MCP end to end, beside the same search called in the memory service.

    python bench/bench_mcp.py                                  # 10k and 100k, 200 queries, concurrency 8
    python bench/bench_mcp.py --sizes 10000 --queries 100 --db-modes pool --no-append

For each corpus of bench/search_bench.py (10k and 100k fragments in one workspace, 20 roles,
50 collections, 50 readers; built when missing, which takes a while the first time):

* service: `fragments_search(caller=…, query=…)` (memory_search in the domain) called in this
  process, on the share of the cores one server worker gets (MEMORYHUB_CORES_PER_PROCESS), with
  the MCP result budget and rendered as the contract's output, the memory core's own number
  (query embedding, both index queries under the visibility predicate, row check, fusion, budget,
  receipt);
* MCP: `tools/call memory_search` at revision 2026-07-28 over HTTP to `memoryhub.asgi` served as it
  is deployed (`python -m mcpapi.serving`, one worker process per core unless --workers): the
  gateway (Origin, size, bearer token checked in the database, rate limit in Redis), the SDK,
  argument validation, the in-process client, the
  same search and receipt, the JSON answer. Each reader has an access token of their own. One
  server runs for each --db-modes entry, all at once (bench/common.py's DB_MODES; default "pool", the shipped
  setting, and "per-request", a new database connection for every token check and tool call).

Both paths run the same queries with the same readers: first one at a time, interleaved (for each
query the service and each server in turn, the order rotating, so all see the same machine at the
same moment; p50 / p95), then each alone with 8 clients at once for a fixed number of requests
(requests/s, and p50 / p95 under that load). The
service's concurrent run uses 8 threads in this process, each with its own database connection.
The MCP clients are 8 threads in this process with keep-alive connections, so client and server
share the machine's cores, as they do in the service run. Rate limits are lifted for the run.

Results: bench/results/mcp_bench.json, and (unless --no-append) the section in docs/benchmarks.md
is replaced or added.
"""

from __future__ import annotations

import argparse
import contextlib
import datetime as dt
import json
import os
import platform
import random
import re
import secrets
import statistics
import sys
import tempfile
import threading
import time
from collections.abc import Callable
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from bench_edge import free_port, process, service_env  # noqa: E402
from common import DB_MODES, bench_database, percentile, publish, summary  # noqa: E402
from search_bench import DATA, Corpus, build, slug  # noqa: E402

from mcpapi.serving import CORES_PER_PROCESS, cores_per_process, default_workers  # noqa: E402

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


def tool_call(http, url: str, token: str, name: str, arguments: dict,  # type: ignore[no-untyped-def]
              client: str = "bench-mcp") -> dict:
    """`tools/call name` at revision MODERN with `token`; its structured result."""
    body = json.dumps({
        "jsonrpc": "2.0", "id": 1, "method": "tools/call",
        "params": {"name": name, "arguments": arguments, "_meta": {
            "io.modelcontextprotocol/protocolVersion": MODERN,
            "io.modelcontextprotocol/clientCapabilities": {},
            "io.modelcontextprotocol/clientInfo": {"name": client, "version": "0"},
        }},
    }).encode()
    answer = http.post(url, content=body, headers={
        "Content-Type": "application/json", "Accept": "application/json, text/event-stream",
        "MCP-Protocol-Version": MODERN, "Mcp-Method": "tools/call", "Mcp-Name": name,
        "Authorization": f"Bearer {token}",
    })
    payload = answer.json()
    if answer.status_code != 200 or payload.get("result", {}).get("isError"):
        raise RuntimeError(f"{name} over MCP: {answer.status_code} {answer.text[:300]}")
    result: dict = payload["result"]["structuredContent"]
    return result


def mcp_call(http, url: str, token: str, query: str) -> None:  # type: ignore[no-untyped-def]
    if not tool_call(http, url, token, "memory_search", {"query": query})["receipt_id"]:
        raise RuntimeError("no receipt")


def concurrent(
    make_worker: Callable[[], Callable[[int], None]], n: int, clients: int, on_exit: Callable[[], None] | None = None
) -> dict:
    """`n` calls shared by `clients` threads; each thread gets its own `make_worker()` and
    runs `on_exit` when it is done."""
    samples: list[float] = []
    failures: list[BaseException] = []
    lock = threading.Lock()
    counter = iter(range(n))
    barrier = threading.Barrier(clients + 1)

    def run() -> None:
        try:
            work_through(make_worker())
        finally:
            if on_exit is not None:
                on_exit()

    def work_through(work: Callable[[int], None]) -> None:
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


def searches_at_once(url: str, tokens: list[tuple[object, str]], plan: list[tuple[str, int]], n: int,
                     clients: int) -> dict:
    """`n` memory_search calls over MCP at `url` (the plan's queries, each by
    its reader's token) shared by `clients` threads, each on a keep-alive
    connection of its own (`concurrent`'s figures)."""
    import httpx2

    opened: list = []

    def worker() -> Callable[[int], None]:
        own = httpx2.Client(timeout=120, trust_env=False)
        opened.append(own)
        return lambda i: mcp_call(own, url, tokens[plan[i % len(plan)][1]][1], plan[i % len(plan)][0])

    try:
        return concurrent(worker, n, clients)
    finally:
        for own in opened:
            own.close()


def measure(size: int, queries: list[str], args: argparse.Namespace) -> dict:
    import httpx2
    from django.db import connection

    from memoryhub.mcp_adapter.render import SEARCH_RESULT_BUDGET, search_output
    from memoryhub.services.search import fragments_search

    ports = {mode: free_port() for mode in args.db_modes}
    urls = {mode: f"http://127.0.0.1:{port}" for mode, port in ports.items()}
    tokens = {mode: tokens_for(size, url) for mode, url in urls.items()}  # one per reader and server
    callers = [caller for caller, _ in next(iter(tokens.values()))]
    rng = random.Random(size)
    plan = [(query, rng.randrange(len(callers))) for query in queries]
    prefix = f"bench-mcp-{secrets.token_hex(4)}"
    result: dict = {"fragments": size, "queries": len(queries), "clients": args.concurrency, "mcp": {}}

    def service(i: int) -> None:
        query, reader = plan[i % len(plan)]
        # What the in-process MCP client runs for memory_search: the search fitted to
        # the MCP result budget, rendered as the contract's output.
        search_output(fragments_search(caller=callers[reader], query=query, budget=SEARCH_RESULT_BUDGET))

    logs = Path(tempfile.mkdtemp(prefix="bench-mcp-"))
    with contextlib.ExitStack() as stack:
        for mode in args.db_modes:
            env = service_env(urls[mode], prefix, **DB_MODES[mode])
            stack.enter_context(process(f"memoryhub-{mode}", "memoryhub.asgi:application", ports[mode], env, logs,
                                        workers=args.workers))
        http = stack.enter_context(httpx2.Client(timeout=120, trust_env=False))

        def over_mcp(mode: str) -> Callable[[int], None]:
            def call(i: int) -> None:
                query, reader = plan[i % len(plan)]
                mcp_call(http, f"{urls[mode]}/mcp", tokens[mode][reader][1], query)
            return call

        # One at a time, interleaved: for each query the service and every server in turn
        # (the order rotating), so all of them see the same machine at the same moment.
        paths = {"service": service, **{mode: over_mcp(mode) for mode in args.db_modes}}
        for i in range(min(10, len(plan))):  # warm the embedders, caches and connections
            for call in paths.values():
                call(i)
        samples: dict[str, list[float]] = {name: [] for name in paths}
        names = list(paths)
        before = {mode: scrape(http, urls[mode]) for mode in args.db_modes}
        for i in range(len(plan)):
            shift = i % len(names)
            for name in names[shift:] + names[:shift]:
                started = time.perf_counter()
                paths[name](i)
                samples[name].append((time.perf_counter() - started) * 1000)
        after = {mode: scrape(http, urls[mode]) for mode in args.db_modes}
        result["service"] = summary(samples["service"])

        # Then each path alone with `clients` at once.
        result["service_concurrent"] = concurrent(
            lambda: service, len(plan) * args.rounds, args.concurrency, on_exit=lambda: connection.close()
        )
        connection.close()
        for mode in args.db_modes:
            many = searches_at_once(f"{urls[mode]}/mcp", tokens[mode], plan, len(plan) * args.rounds,
                                    args.concurrency)
            one = summary(samples[mode])
            # One client at a time: each call starts when the one before it ended.
            one["requests_per_s"] = round(1000 / statistics.mean(samples[mode]), 1)
            result["mcp"][mode] = {
                "one_at_a_time": one, "concurrent": many,
                "where_it_goes": where_it_goes(before[mode], after[mode], len(plan), client=samples[mode],
                                               service=samples["service"]),
                "overhead": {
                    "p50_ratio": round(one["p50_ms"] / result["service"]["p50_ms"], 2),
                    "p50_added_ms": round(one["p50_ms"] - result["service"]["p50_ms"], 1),
                    "throughput_ratio": round(
                        many["requests_per_s"] / result["service_concurrent"]["requests_per_s"], 2),
                    "scaling": round(many["requests_per_s"] / one["requests_per_s"], 2),
                },
            }
    return result


SAMPLE = re.compile(r"^(?P<key>[a-z_]+(?:\{[^}]*\})?) (?P<value>[-0-9.e+]+)$")


def scrape(http, url: str) -> dict[str, float]:  # type: ignore[no-untyped-def]
    """The server's metrics (/metrics answers a loopback client), every worker's summed."""
    answer = http.get(f"{url}/metrics")
    answer.raise_for_status()
    return {match["key"]: float(match["value"]) for match in map(SAMPLE.match, answer.text.splitlines()) if match}


def where_it_goes(before: dict[str, float], after: dict[str, float], n: int, *, client: list[float],
                  service: list[float]) -> dict[str, float]:
    """Where MCP's time went in the one-at-a-time run, in milliseconds per request (means: the
    server's own timers, moved by these `n` requests, beside the client's and the service's means)."""
    def moved(key: str) -> float:
        return after.get(key, 0.0) - before.get(key, 0.0)

    def per_request(key: str) -> float:
        # A timer these requests did not move (a metric renamed, a label added) would read as 0 ms.
        counted = key.replace("_sum{", "_count{")
        if moved(counted) != n:
            raise RuntimeError(f"{counted} moved by {moved(counted):g}, not by the run's {n} requests")
        return moved(key) * 1000 / n

    request = per_request('memoryhub_mcp_request_seconds_sum{endpoint="/mcp"}')
    token = per_request('memoryhub_mcp_step_seconds_sum{step="token"}')
    rate_limit = per_request('memoryhub_mcp_step_seconds_sum{step="rate_limit"}')
    tool = per_request('memoryhub_mcp_tool_seconds_sum{outcome="ok",tool="memory_search"}')
    parts = {
        "client_mean": statistics.mean(client),
        "service_mean": statistics.mean(service),
        "server_request": request,
        # What the client and HTTP cost around the server's request.
        "http_and_client": statistics.mean(client) - request,
        "token_check": token,
        "rate_limit": rate_limit,
        # The SDK (parsing, validation, serialising) and the gateway's other checks.
        "sdk_and_gateway_rest": request - token - rate_limit - tool,
        "tool": tool,
        # The tool call beyond the same search in this process: the thread hop, the caller's lookup,
        # the result budget's rendering and checks, and the two processes' noise.
        "tool_beyond_service": tool - statistics.mean(service),
    }
    return {name: round(value, 2) for name, value in parts.items()}


def markdown(results: dict) -> str:
    rows = []
    for size, r in results["sizes"].items():
        s, sc = r["service"], r["service_concurrent"]
        for mode, m in r["mcp"].items():
            one, many, o = m["one_at_a_time"], m["concurrent"], m["overhead"]
            rows.append(
                f"| {int(size):,} | {mode} | {s['p50_ms']} / {s['p95_ms']} | {one['p50_ms']} / {one['p95_ms']} | "
                f"{o['p50_ratio']}× (+{o['p50_added_ms']} ms) | {sc['requests_per_s']} ({sc['p50_ms']} / "
                f"{sc['p95_ms']}) | {many['requests_per_s']} ({many['p50_ms']} / {many['p95_ms']}) | "
                f"{o['throughput_ratio']} | {one['requests_per_s']} | {o['scaling']}× |"
            )
    breakdown = [
        f"| {int(size):,} | {mode} | {w['client_mean']} | {w['service_mean']} | {w['http_and_client']} | "
        f"{w['token_check']} | {w['rate_limit']} | {w['sdk_and_gateway_rest']} | {w['tool_beyond_service']} |"
        for size, r in results["sizes"].items() for mode, m in r["mcp"].items()
        if (w := m.get("where_it_goes"))
    ]
    modes = {mode for r in results["sizes"].values() for mode in r["mcp"]}
    # What each way of getting database connections is, said of the ways this run served.
    ways = {"pool": "`pool`, the shipped default: psycopg's pool",
            "per-request": "`per-request`: `DATABASE_POOL=0`, a new connection each time"}
    connections = "; ".join(text for mode, text in ways.items() if mode in modes)
    per_request = (
        "The `per-request` rows add what "
        "connecting costs: the token check and the tool call each run in a worker thread, so without a pool "
        "each opens a database connection of its own (Django advises against persistent connections under "
        "ASGI and for a pool instead). " if "per-request" in modes else "")
    return (
        f"{SECTION} ({results['date']})\n\n"
        f"`memory_search` called in the memory service (this process) against the same call over MCP "
        f"(`tools/call` at revision {MODERN}, HTTP keep-alive, a bearer token per reader, served by "
        f"`python -m mcpapi.serving memoryhub.asgi:application` with {results['workers']}, the way it is "
        "deployed), same queries and readers, on search_bench's corpora (20 roles, 50 collections, 50 readers); "
        f"{results['queries']} queries one at a time (each query through every path in "
        f"turn), then {results['rounds']}× as many with {results['clients']} clients at once, one path after the "
        f"other. {results['machine']}; embedded PostgreSQL 16; one server per way of getting database "
        f"connections ({connections}); "
        f"1-minute load average {results['load_average_before']} when it started. Latencies in ms, p50 / p95.\n\n"
        "| fragments | server's connections | service, one at a time | MCP, one at a time | MCP overhead p50 | "
        f"service req/s at {results['clients']} (p50 / p95) | MCP req/s at {results['clients']} (p50 / p95) "
        f"| MCP / service throughput | MCP req/s, one client | MCP at {results['clients']} / one client |\n"
        "|---|---|---|---|---|---|---|---|---|---|\n" + "\n".join(rows) + "\n\n"
        "What the MCP path adds per request: HTTP parsing, the gateway's checks, the token with who holds it (one "
        "statement) and the caller the tool acts as (one more), the rate limit (one Redis script), the SDK's "
        f"JSON-RPC handling and output validation, and a thread hop into the synchronous domain. {per_request}"
        f"Under load, the {results['clients']} MCP clients and the server share the same cores.\n\n"
        "Where the one-at-a-time run's time went, in ms per request (means, from the server's own timers at "
        "`/metrics`: the whole request, the token's check, the rate limit and the tool call; the SDK and the "
        "gateway's other checks are the request's rest; the tool beyond the service is the tool call's mean "
        "less the same searches' in this process: the thread hop, the caller's lookup, the result budget):\n\n"
        "| fragments | server's connections | MCP, client's mean | service mean | HTTP and client | token check | "
        "rate limit | SDK and gateway's rest | tool beyond the service |\n"
        "|---|---|---|---|---|---|---|---|---|\n" + "\n".join(breakdown) + "\n\n"
        "Rerun: `python bench/bench_mcp.py [--sizes 10000,100000] [--queries 200] [--concurrency 8] "
        "[--db-modes pool,per-request] [--workers N] [--no-append]` (benchmark database `memoryhub_bench`; writes "
        "`bench/results/mcp_bench.json` and replaces this section).\n"
    )


def server_arguments(parser: argparse.ArgumentParser) -> argparse.Namespace:
    """The arguments every benchmark of servers over MCP takes, parsed with
    the parser's own; this process then runs on one server worker's share of
    the cores, as the service path of a search does in one."""
    parser.add_argument("--concurrency", type=int, default=8)
    parser.add_argument("--workers", type=int, default=0,
                        help="worker processes per server (default 0: mcpapi.serving's own, one per core)")
    parser.add_argument("--no-append", action="store_true", help="leave docs/benchmarks.md alone")
    args = parser.parse_args()
    os.environ.setdefault(CORES_PER_PROCESS, str(cores_per_process(args.workers or default_workers())))
    return args


def run_record(args: argparse.Namespace) -> dict:
    """What a run over MCP records of itself, the machine and its load; its
    results go under "sizes"."""
    return {
        "queries": args.queries, "rounds": args.rounds, "clients": args.concurrency,
        "machine": f"{platform.machine()}, {os.cpu_count()} CPUs, Python {platform.python_version()}",
        "workers": (f"{args.workers} worker processes" if args.workers
                    else f"its default of one worker process per core ({default_workers()})"),
        "date": dt.date.today().isoformat(), "load_average_before": round(os.getloadavg()[0], 1), "sizes": {},
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--sizes", default="10000,100000")
    parser.add_argument("--queries", type=int, default=200, help="queries per size, one at a time")
    parser.add_argument("--rounds", type=int, default=2, help="concurrent run: this many times the queries")
    parser.add_argument("--db-modes", default="pool,per-request", type=lambda text: text.split(","),
                        help=f"how the server gets database connections, any of {', '.join(DB_MODES)}")
    args = server_arguments(parser)

    data = json.loads(DATA.read_text())
    seeds = [item["value"] for item in data["fragments"]]
    results = run_record(args)
    with bench_database():
        corpus = Corpus(seeds)
        for size in [int(s) for s in args.sizes.split(",")]:
            build(size, corpus, rebuild=False)
            rng = random.Random(7)
            queries = [q["query"] for q in rng.sample(data["queries"], min(args.queries, len(data["queries"])))]
            results["sizes"][str(size)] = measure(size, queries, args)
            print(json.dumps(results["sizes"][str(size)], indent=1), flush=True)
    publish("mcp_bench", results, SECTION, markdown(results), to_docs=not args.no_append)


if __name__ == "__main__":
    main()
