"""memory_search with the primary alone against the primary and one streaming replica, and the read
pool's own costs.

    python bench/bench_replica.py                       # 10k fragments, 200 queries, 8 clients, 3 rounds
    python bench/bench_replica.py --size 10000 --queries 100 --rounds 2 --no-append

On the corpus of bench/search_bench.py of --size fragments (built when missing):

* a hot standby of the benchmark's PostgreSQL is made on this machine with the embedded PostgreSQL's own
  binaries (`pg_basebackup -R` into a folder of its own, a second port: tests/support/replica.py);
* two servers run as deployed (`python -m mcpapi.serving memoryhub.asgi:application`, one worker process
  per core), both on the benchmark database: "primary" alone, and "replica" with DATABASE_READ_URLS
  naming the standby;
* one client at a time: memory_search and whoami (whose probe reads where a search would) over MCP
  against each server in turn, the order rotating (p50 / p95);
* 8 clients at once (threads with keep-alive connections) for queries x rounds requests against one
  server, then the other, the order alternating from round to round (requests/s, p50 / p95 per round);
  the replica server's own counter says where its reads were served;
* in this process, on one core's share: `replicas.choose()` (the position read from Redis, and the
  standby's state when asked), the state statement alone, and whoami's probe (`health.read_probe`)
  with no replica and with the standby.

Both PostgreSQL servers, both servers' workers and the clients share this machine's cores: a replica
here adds no CPU, so reads moved to it are the same work on the same cores (see docs/benchmarks.md).

Results: bench/results/replica_bench.json, and (unless --no-append) the section in docs/benchmarks.md.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import random
import re
import secrets
import statistics
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from bench_edge import free_port, process, service_env  # noqa: E402
from bench_mcp import mcp_call, run_record, scrape, searches_at_once, server_arguments, tokens_for, tool_call  # noqa: E402
from common import bench_database, publish, summary, timed  # noqa: E402
from search_bench import DATA, Corpus, build  # noqa: E402

SECTION = "## Read replicas: the primary alone against the primary and one replica"
SERVERS = ("primary", "replica")
READS = re.compile(r'memoryhub_read_pool_reads_total\{served_by="(?P<where>[a-z_]+)",why="(?P<why>[a-z_]+)"\}')


def whoami_call(http, url: str, token: str) -> str:  # type: ignore[no-untyped-def]
    state: str = tool_call(http, url, token, "whoami", {}, client="bench-replica")["read_pool_ready"]
    return state


def served_by(metrics: dict[str, float]) -> dict[str, float]:
    """Reads by where they were served, and (`where:why`) why."""
    found: dict[str, float] = dict.fromkeys(("replica", "primary", "primary_after_loss"), 0.0)
    for key, value in metrics.items():
        match = READS.fullmatch(key)
        if match:
            found[match["where"]] += value
            found[f"{match['where']}:{match['why']}"] = found.get(f"{match['where']}:{match['why']}", 0.0) + value
    return found


def moved(before: dict[str, float], after: dict[str, float]) -> dict[str, float]:
    return {key: count - before.get(key, 0.0) for key, count in after.items()}


def measure(size: int, queries: list[str], args: argparse.Namespace) -> dict:
    import httpx2
    from django.db import connection

    from tests.support.replica import Replica

    result: dict = {"fragments": size, "queries": len(queries), "clients": args.concurrency}
    started = time.perf_counter()
    standby = Replica(primary=dict(connection.settings_dict)).create()
    result["standby_made_seconds"] = round(time.perf_counter() - started, 1)
    try:
        ports = {name: free_port() for name in SERVERS}
        urls = {name: f"http://127.0.0.1:{port}" for name, port in ports.items()}
        tokens = {name: tokens_for(size, url) for name, url in urls.items()}
        rng = random.Random(size)
        readers = len(tokens["primary"])
        plan = [(query, rng.randrange(readers)) for query in queries]
        prefix = f"bench-replica-{secrets.token_hex(4)}"
        standby.catch_up()
        logs = Path(tempfile.mkdtemp(prefix="bench-replica-"))
        with contextlib.ExitStack() as stack:
            for name in SERVERS:
                extra = {"DATABASE_READ_URLS": standby.url()} if name == "replica" else {}
                env = service_env(urls[name], prefix, **extra)
                stack.enter_context(process(f"memoryhub-{name}", "memoryhub.asgi:application", ports[name], env,
                                            logs, workers=args.workers))
            http = stack.enter_context(httpx2.Client(timeout=120, trust_env=False))

            def search(name: str) -> Callable[[int], None]:
                return lambda i: mcp_call(http, f"{urls[name]}/mcp", tokens[name][plan[i % len(plan)][1]][1],
                                          plan[i % len(plan)][0])

            def whoami(name: str) -> Callable[[int], None]:
                def call(i: int) -> None:
                    state = whoami_call(http, f"{urls[name]}/mcp", tokens[name][plan[i % len(plan)][1]][1])
                    if state != "ready":
                        raise RuntimeError(f"whoami on {name}: read_pool_ready {state}")
                return call

            paths = {f"{kind}:{name}": (search if kind == "search" else whoami)(name)
                     for kind in ("search", "whoami") for name in SERVERS}
            for i in range(min(10, len(plan))):  # warm the embedders, caches and connections
                for call in paths.values():
                    call(i)
            before = served_by(scrape(http, urls["replica"]))
            samples: dict[str, list[float]] = {name: [] for name in paths}
            names = list(paths)
            for i in range(len(plan)):
                shift = i % len(names)
                for name in names[shift:] + names[:shift]:
                    began = time.perf_counter()
                    paths[name](i)
                    samples[name].append((time.perf_counter() - began) * 1000)
            result["one_at_a_time"] = {name: summary(values) for name, values in samples.items()}
            result["one_at_a_time_served_by"] = moved(before, served_by(scrape(http, urls["replica"])))

            rounds: dict[str, list[dict]] = {name: [] for name in SERVERS}
            before = served_by(scrape(http, urls["replica"]))
            for round_number in range(args.rounds):
                order = SERVERS if round_number % 2 == 0 else SERVERS[::-1]
                for name in order:
                    rounds[name].append(searches_at_once(f"{urls[name]}/mcp", tokens[name], plan, len(plan),
                                                         args.concurrency))
            result["concurrent"] = {
                name: {"rounds": runs,
                       "requests_per_s_median": statistics.median(run["requests_per_s"] for run in runs),
                       "p50_ms_median": statistics.median(run["p50_ms"] for run in runs)}
                for name, runs in rounds.items()}
            result["concurrent_served_by"] = moved(before, served_by(scrape(http, urls["replica"])))
            result["throughput_ratio"] = round(result["concurrent"]["replica"]["requests_per_s_median"]
                                               / result["concurrent"]["primary"]["requests_per_s_median"], 2)
        result["in_process"] = in_process(standby, [caller for caller, _ in tokens["primary"]], args.repeat)
    finally:
        standby.remove()
    return result


def in_process(standby, callers: list, repeat: int) -> dict:  # type: ignore[no-untyped-def]
    """The read pool's own steps, timed in this process (milliseconds per call)."""
    from django.conf import settings
    from django.db import connection
    from django.test.utils import override_settings

    from memoryhub.database import replicas
    from memoryhub.services import health
    from tests.support.replica import register, unregister

    caller = callers[0]
    found: dict = {}
    found["probe_no_replica"] = summary(timed(lambda: health.read_probe(caller=caller), repeat))
    register(standby, "replica1")
    try:
        with override_settings(MEMORYHUB_READ_REPLICAS=("replica1",)):
            replicas.choose()  # the first reading of its state, and its connection
            found["choose_state_known"] = summary(timed(replicas.choose, repeat))
            pool = replicas.read_pool()
            assert pool is not None
            found["state_statement"] = summary(timed(lambda: pool.check("replica1"), repeat))
            with override_settings(MEMORYHUB_READ_REPLICA_CHECK_SECONDS=0.0):
                found["choose_state_read_each_time"] = summary(timed(replicas.choose, repeat))
            choice = replicas.choose()
            if choice.alias != "replica1":
                raise RuntimeError(f"the standby did not serve: {choice}")
            found["probe_with_replica"] = summary(timed(lambda: health.read_probe(caller=caller), repeat))
            # What a writing transaction adds after its commit: the position read and recorded.
            found["write_position_recorded"] = summary(timed(lambda: replicas.note_written(connection), repeat))
        found["check_seconds"] = settings.MEMORYHUB_READ_REPLICA_CHECK_SECONDS
    finally:
        unregister("replica1")
    return found


def where_served(by: dict[str, float]) -> str:
    """How many reads the standby and the primary served, and why the primary did."""
    reasons = [f"{key.split(':', 1)[1].replace('_', ' ')}: {count:g}" for key, count in sorted(by.items())
               if key.startswith("primary:") and count]
    why = f" ({', '.join(reasons)})" if reasons else ""
    return f"{by['replica']:g} by the standby, {by['primary']:g} by the primary{why}"


def markdown(results: dict) -> str:
    lines = [SECTION, "",
             f"`python bench/bench_replica.py` on {results['date']}: {results['machine']}; each server with "
             f"{results['workers']}; load average {results['load_average_before']} before the run. "
             "The standby runs on the same machine as the primary, the servers and the clients "
             "(see the text below the tables).", ""]
    for size, found in results["sizes"].items():
        one = found["one_at_a_time"]
        lines += [f"### {int(size):,} fragments ({found['queries']} queries, standby made in "
                  f"{found['standby_made_seconds']} s)", "",
                  "| one client at a time | primary alone p50 / p95 | with the replica p50 / p95 |", "|---|---|---|"]
        for kind in ("search", "whoami"):
            lines.append(f"| `{'memory_search' if kind == 'search' else 'whoami'}` over MCP | "
                         f"{one[f'{kind}:primary']['p50_ms']} / {one[f'{kind}:primary']['p95_ms']} ms | "
                         f"{one[f'{kind}:replica']['p50_ms']} / {one[f'{kind}:replica']['p95_ms']} ms |")
        by = found["one_at_a_time_served_by"]
        lines += ["", f"Reads the replica server served, one at a time: {where_served(by)}, "
                      f"{by['primary_after_loss']:g} after losing the standby.",
                  "", f"| {found['clients']} clients at once | requests/s by round | p50 by round |", "|---|---|---|"]
        for name in SERVERS:
            runs = found["concurrent"][name]["rounds"]
            lines.append(f"| {'primary alone' if name == 'primary' else 'with the replica'} | "
                         f"{', '.join(str(run['requests_per_s']) for run in runs)} | "
                         f"{', '.join(str(run['p50_ms']) for run in runs)} ms |")
        by = found["concurrent_served_by"]
        lines += ["", f"Throughput with the replica / primary alone (medians of the rounds): "
                      f"**{found['throughput_ratio']}×**. Reads the replica server served at once: "
                      f"{where_served(by)}.", ""]
        own = found["in_process"]
        lines += ["| in this process | p50 / p95 |", "|---|---|",
                  f"| `replicas.choose()`, the standby's state known | {own['choose_state_known']['p50_ms']} / "
                  f"{own['choose_state_known']['p95_ms']} ms |",
                  f"| `replicas.choose()`, the state read each time | {own['choose_state_read_each_time']['p50_ms']} / "
                  f"{own['choose_state_read_each_time']['p95_ms']} ms |",
                  f"| a state reading alone (the primary's position, then the standby's state) | "
                  f"{own['state_statement']['p50_ms']} / "
                  f"{own['state_statement']['p95_ms']} ms |",
                  f"| whoami's probe, no replica | {own['probe_no_replica']['p50_ms']} / "
                  f"{own['probe_no_replica']['p95_ms']} ms |",
                  f"| whoami's probe, served by the standby | {own['probe_with_replica']['p50_ms']} / "
                  f"{own['probe_with_replica']['p95_ms']} ms |",
                  f"| a write's position read and recorded, after its commit | "
                  f"{own['write_position_recorded']['p50_ms']} / {own['write_position_recorded']['p95_ms']} ms |",
                  ""]
    last = next(iter(results["sizes"].values()))
    probe_added = (last["in_process"]["probe_with_replica"]["p50_ms"]
                   - last["in_process"]["probe_no_replica"]["p50_ms"])
    whoami_added = (last["one_at_a_time"]["whoami:replica"]["p50_ms"]
                    - last["one_at_a_time"]["whoami:primary"]["p50_ms"])
    lines += [
        "**Why the figure is modest here.** A replica on this machine adds no CPU. The standby, the primary, both "
        "servers' worker processes and the 8 client threads share the same 2 cores, and the 8-client run keeps "
        "them busy (the query's embedding and each worker's Python as much as PostgreSQL). Sending a search's "
        "three read statements (the prologue, the index statement, the row check) to the standby moves the same "
        "work to another process on the same cores. The standby also replays the primary's WAL, every search's "
        "receipt included. So no gain is to be expected here beyond what separates two rounds of one server. Where the "
        "replica runs on a machine of its own, those three statements (most of a search's time in PostgreSQL) "
        "leave the primary's cores, and the primary keeps the writes, the receipts and the token checks.",
        "",
        "**What the read pool costs a read.** `choose()` reads the primary's last write position from Redis (one "
        "round trip). At most once a second per process, or when a read needs a later write than the replica "
        "was last seen to have replayed, it also reads the standby's state (one statement) and the primary's "
        "own position (one more). whoami's probe makes the same choice before its read: "
        f"{probe_added:+.2f} ms at p50 in this process, {whoami_added:+.2f} ms over MCP (first table). A "
        "writing transaction adds one statement and one Redis script after its commit, before it is answered "
        "(last row). With no replica configured none of these run.",
        "",
        "Rerun: `python bench/bench_replica.py [--size 10000] [--queries 200] [--rounds 3] [--concurrency 8] "
        "[--workers N] [--no-append]` (benchmark database `memoryhub_bench`; the standby is made in a "
        "temporary folder and removed; writes `bench/results/replica_bench.json` and replaces this section).",
        "",
    ]
    return "\n".join(lines) + "\n"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--size", type=int, default=10000)
    parser.add_argument("--queries", type=int, default=200, help="queries, one at a time and per concurrent round")
    parser.add_argument("--rounds", type=int, default=3, help="concurrent rounds per server, alternating")
    parser.add_argument("--repeat", type=int, default=300, help="calls of each in-process step")
    args = server_arguments(parser)

    data = json.loads(DATA.read_text())
    results = run_record(args)
    with bench_database():
        build(args.size, Corpus([item["value"] for item in data["fragments"]]), rebuild=False)
        rng = random.Random(7)
        queries = [q["query"] for q in rng.sample(data["queries"], min(args.queries, len(data["queries"])))]
        results["sizes"][str(args.size)] = measure(args.size, queries, args)
        print(json.dumps(results["sizes"][str(args.size)], indent=1), flush=True)
    publish("replica_bench", results, SECTION, markdown(results), to_docs=not args.no_append)


if __name__ == "__main__":
    main()
