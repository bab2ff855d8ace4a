"""A server worker's first memory_search over MCP, beside the searches after it.

    python bench/bench_first_request.py                              # 5 starts, 4 searches after each
    python bench/bench_first_request.py --compare /path/to/checkout  # alternating with another checkout

Each start launches the product's server as it is deployed (`python -m mcpapi.serving
memoryhub.asgi:application`, one worker process, so the first request meets a worker that has
never searched) on search_bench.py's 10k corpus (built when missing), and times it from launch
until /healthz answers. Then `--searches` memory_search calls over MCP go one after the other
(revision 2026-07-28, keep-alive), each by another reader of the corpus with a token of their
own, each with another query. With --compare, starts alternate between this checkout and the
other one (the code it serves is the other's; the database and the readers are the same), so both
see the same machine. Milliseconds per search, by its place after the start; seconds to start.

Results: bench/results/first_request.json.
"""

from __future__ import annotations

import argparse
import datetime as dt
import json
import os
import platform
import random
import statistics
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from bench_edge import free_port, process, service_env  # noqa: E402
from bench_mcp import mcp_call, tokens_for  # noqa: E402
from common import ROOT, bench_database, write_results  # noqa: E402
from search_bench import DATA, Corpus, build  # noqa: E402

SIZE = 10_000


def one_start(root: Path, queries: list[str], logs: Path) -> dict:
    import httpx2

    port = free_port()
    url = f"http://127.0.0.1:{port}"
    readers = tokens_for(SIZE, url)
    env = service_env(url, f"bench-first-{port}")
    started = time.perf_counter()
    with process(f"first-{port}", "memoryhub.asgi:application", port, env, logs, workers=1, root=root):
        up = time.perf_counter() - started
        timings = []
        with httpx2.Client(timeout=60, trust_env=False) as http:
            for number, query in enumerate(queries):
                token = readers[number % len(readers)][1]
                begun = time.perf_counter()
                mcp_call(http, f"{url}/mcp", token, query)
                timings.append(round((time.perf_counter() - begun) * 1000, 1))
    return {"started_s": round(up, 2), "searches_ms": timings}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--starts", type=int, default=5, help="starts of each checkout")
    parser.add_argument("--searches", type=int, default=4, help="searches after each start")
    parser.add_argument("--compare", type=Path, default=None, help="another checkout, started in turn with this one")
    args = parser.parse_args()
    data = json.loads(DATA.read_text())
    rng = random.Random(11)
    roots = {"this checkout": ROOT, **({"compared": args.compare.resolve()} if args.compare else {})}
    runs: dict[str, list[dict]] = {name: [] for name in roots}
    logs = Path(tempfile.mkdtemp(prefix="bench-first-"))
    load_average_before = round(os.getloadavg()[0], 1)
    with bench_database():
        build(SIZE, Corpus([item["value"] for item in data["fragments"]]), rebuild=False)
        for _ in range(args.starts):
            # The same searches after each checkout's start.
            queries = [item["query"] for item in rng.sample(data["queries"], args.searches)]
            for name, root in roots.items():
                runs[name].append(one_start(root, queries, logs))
                print(name, json.dumps(runs[name][-1]), flush=True)
    result = {
        "date": dt.date.today().isoformat(),
        "machine": f"{platform.machine()}, {os.cpu_count()} CPUs, Python {platform.python_version()}",
        "load_average_before": load_average_before,
        "roots": {name: str(root) for name, root in roots.items()},
        "fragments": SIZE,
        "runs": runs,
        "median": {
            name: {
                "started_s": statistics.median(run["started_s"] for run in done),
                "searches_ms": [statistics.median(run["searches_ms"][place] for run in done)
                                for place in range(args.searches)],
            }
            for name, done in runs.items()
        },
    }
    print(json.dumps(result["median"], indent=1))
    print(f"wrote {write_results('first_request', result)}")


if __name__ == "__main__":
    main()
