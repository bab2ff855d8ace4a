"""Soak under faults: people, agents and a connector write and search against a
whole memoryhub on loopback while, one at a time, the Celery worker is
SIGKILLed, Redis restarts, PostgreSQL restarts (fast shutdown) and the ASGI
process restarts. For each: requests, answers by status, the longest a client
went without a successful answer, the time from the fault's end to the first
success, writes answered as done, and writes lost (must be 0).

    python bench/soak.py [--before 20] [--after 40] [--people 6] [--agents 2] [--no-docs]

The same harness (tests/support/faults.py) runs shorter in tests/faults/.
Results: bench/results/soak.json and docs/benchmarks.md ("Faults under load").
"""

from __future__ import annotations

import argparse
import datetime as dt
import os
import sys
import tempfile
from dataclasses import asdict
from pathlib import Path

from common import ROOT, publish

sys.path.insert(0, str(ROOT))
os.environ.setdefault("DJANGO_SETTINGS_MODULE", "memoryhub.settings")

FAULTS = ("kill worker", "restart redis", "restart postgres", "restart web")
HEADING = "## Faults under load"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--before", type=float, default=20.0, help="seconds of load before each fault")
    parser.add_argument("--after", type=float, default=40.0, help="seconds of load after it")
    parser.add_argument("--people", type=int, default=6)
    parser.add_argument("--agents", type=int, default=2)
    parser.add_argument("--no-docs", action="store_true")
    args = parser.parse_args()

    from tests.support.faults import Stack, run_fault

    with tempfile.TemporaryDirectory(prefix="memoryhub-soak-") as folder:
        stack = Stack(Path(folder) / "data")
        stack.start(people=args.people, agents=args.agents)
        try:
            reports = [run_fault(stack, fault, before=args.before, after=args.after) for fault in FAULTS]
        finally:
            stack.stop()
    rows = "\n".join(report.row() for report in reports)
    section = f"""{HEADING} ({dt.date.today():%Y-%m-%d})

`python bench/soak.py --before {args.before:g} --after {args.after:g} --people {args.people} --agents \
{args.agents}`: {args.people} people and {args.agents} agents write (each write with its own idempotency key,
retried with it until answered) and search over MCP, and a connector upserts multi-paragraph documents,
against `mcpapi.serving` (one worker), a Celery worker with the beat, and the data folder's own PostgreSQL
and Redis, all on loopback. {args.before:g} s of load, the fault, {args.after:g} s more. "Longest outage" is
the longest a client went without a successful answer; "recovery" runs from the restarted service being
back to the first success. Every write answered as done was then found exactly once, and every fragment
was embedded within 60 s.

| fault | requests | answers by status | longest outage | recovery | writes done | writes lost |
|---|---|---|---|---|---|---|
{rows}

During the outages the answers are 503 with Retry-After (the rate limiter fails closed while Redis is
away; a database that cannot be reached is a 503 on every Django path), a tool error the model can read
("memory is briefly unavailable"), or no connection at all while the ASGI process restarts; never a 500,
and none waits past the tool deadline. Nothing restarts the server: the connection pool replaces broken
connections, the broker reconnects, and the sweep re-enqueues enrichment whose task was lost.
"""
    publish("soak", {"reports": [asdict(report) for report in reports], "arguments": vars(args)},
            HEADING, section, to_docs=not args.no_docs)


if __name__ == "__main__":
    main()
