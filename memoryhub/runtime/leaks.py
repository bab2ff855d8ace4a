"""`python -m memoryhub.runtime.leaks DATADIR`: exit 1 if a PostgreSQL, Redis or Celery
worker of ours still runs for that data folder (used after the test run and by the tests)."""

from __future__ import annotations

import sys
from pathlib import Path

import psutil

from memoryhub.runtime import embedded


def leftover_processes(datadir: Path) -> list[str]:
    markers = [
        str(embedded.postgres_dir(datadir)),
        str(embedded.postgres_socket_dir(datadir)),
        str(embedded.redis_socket_path(datadir)),
        # A worker (or the beat it runs) started by `serve` or a test stack names its schedule file.
        str(datadir / "celerybeat-schedule"),
    ]
    found = []
    for proc in psutil.process_iter(attrs=("pid", "cmdline")):
        cmdline = " ".join(proc.info.get("cmdline") or [])
        if any(marker in cmdline for marker in markers):
            found.append(f"{proc.info['pid']}: {cmdline[:200]}")
    return found


def main() -> int:
    datadir = Path(sys.argv[1]).resolve()
    leftovers = leftover_processes(datadir)
    for line in leftovers:
        print(f"left running: {line}", file=sys.stderr)
    if not leftovers:
        print(f"no PostgreSQL, Redis or Celery worker of ours left running for {datadir}")
    return 1 if leftovers else 0


if __name__ == "__main__":
    sys.exit(main())
