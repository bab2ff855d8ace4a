"""Shared plumbing for the memory benchmarks: Django set up against a database
of their own (never the development data), on the embedded PostgreSQL unless
DATABASE_URL points elsewhere.

The benchmark database is `memoryhub_bench` in the server of
MEMORYHUB_DATA_DIR (default ./var); it is migrated on first use and kept
between runs so a large corpus can be reused (pass --rebuild to start over).
"""

from __future__ import annotations

import contextlib
import json
import os
import socket
import statistics
import sys
import time
from collections.abc import Callable, Iterator
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
os.environ.setdefault("DJANGO_SETTINGS_MODULE", "memoryhub.settings")
os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("DATABASE_TEST_NAME", "memoryhub_bench")
os.environ.setdefault("LOG_LEVEL", "WARNING")


@contextlib.contextmanager
def bench_database() -> Iterator[None]:
    """Start the embedded PostgreSQL if needed, point Django at the benchmark
    database (created and migrated when missing), stop what we started."""
    import django

    django.setup()
    from django.db import connection
    from django.test.utils import setup_test_environment

    from memoryhub.runtime.commands import embedded_services_for_command

    with embedded_services_for_command():
        setup_test_environment()
        connection.creation.create_test_db(verbosity=0, autoclobber=True, keepdb=True, serialize=False)
        try:
            yield
        finally:
            connection.close()


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def percentile(values: list[float], q: float) -> float:
    ordered = sorted(values)
    if not ordered:
        return float("nan")
    index = min(len(ordered) - 1, max(0, round(q / 100 * (len(ordered) - 1))))
    return ordered[index]


def timed(fn: Callable[[], object], repeat: int) -> list[float]:
    """Milliseconds per call."""
    samples = []
    for _ in range(repeat):
        started = time.perf_counter()
        fn()
        samples.append((time.perf_counter() - started) * 1000)
    return samples


def summary(samples: list[float]) -> dict[str, float]:
    return {
        "p50_ms": round(statistics.median(samples), 2),
        "p95_ms": round(percentile(samples, 95), 2),
        "n": len(samples),
    }


def write_results(name: str, results: dict) -> Path:
    out = ROOT / "bench" / "results"
    out.mkdir(exist_ok=True)
    path = out / f"{name}.json"
    path.write_text(json.dumps(results, indent=2, sort_keys=True, default=str))
    return path


def publish(name: str, results: dict, heading: str, section: str, *, to_docs: bool) -> None:
    """Write bench/results/<name>.json, print `section`, and (with `to_docs`) put it in
    docs/benchmarks.md in place of the section starting `heading`."""
    path = write_results(name, results)
    print(section)
    print(f"(raw numbers: {path.relative_to(ROOT)})")
    if to_docs:
        docs = ROOT / "docs" / "benchmarks.md"
        docs.write_text(replace_section(docs.read_text(), heading, section))


def replace_section(document: str, heading: str, section: str) -> str:
    """`document` with the section starting `heading` replaced by `section` (or `section` appended)."""
    start = document.find(heading)
    if start < 0:
        return document.rstrip("\n") + "\n\n" + section
    end = document.find("\n## ", start + len(heading))
    rest = document[end + 1:] if end >= 0 else ""
    return document[:start] + section + ("\n" + rest if rest else "")


# How a server process gets its database connections (memoryhub/settings.py).
DB_MODES = {
    "pool": {"DATABASE_POOL": "1"},  # the shipped default: psycopg's pool, one per process
    "per-request": {"DATABASE_POOL": "0", "DATABASE_CONN_MAX_AGE": "0"},  # a new connection each time
    "persistent": {"DATABASE_POOL": "0", "DATABASE_CONN_MAX_AGE": "60"},  # kept per thread
}
