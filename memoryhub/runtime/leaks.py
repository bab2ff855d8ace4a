"""`python -m memoryhub.runtime.leaks DATADIR`: exit 1 if a PostgreSQL, Redis or Celery
worker of ours still runs for that data folder (used after the test run and by the tests)."""

from __future__ import annotations

import os
import sys
from pathlib import Path

import psutil

from memoryhub.runtime import embedded


def leftover_processes(datadir: Path) -> list[str]:
    datadir = datadir.resolve()
    markers = [
        str(embedded.postgres_dir(datadir)),
        str(embedded.postgres_socket_dir(datadir)),
        str(embedded.redis_socket_path(datadir)),
        # A worker (or the beat it runs) started by `serve` or a test stack names its schedule file.
        str(datadir / "celerybeat-schedule"),
    ]
    # This process and those that started it share its environment, and are not left over.
    own = {os.getpid(), *(parent.pid for parent in psutil.Process().parents())}
    found = []
    for proc in psutil.process_iter(attrs=("pid", "cmdline")):
        cmdline = " ".join(proc.info.get("cmdline") or [])
        if any(marker in cmdline for marker in markers) or (
                proc.info["pid"] not in own and _celery_for(proc, cmdline, datadir, markers)):
            found.append(f"{proc.info['pid']}: {cmdline[:200]}")
    return found


def _celery_for(proc: psutil.Process, cmdline: str, datadir: Path, markers: list[str]) -> bool:
    """A Celery process whose environment points at this data folder. A worker
    a test starts names only its queue on its command line: it finds the data
    folder, its database and its broker through its environment. Left running,
    it would take tasks and answer the broadcasts of a later run."""
    if "celery" not in cmdline:
        return False
    try:
        environ = proc.environ()
    except (psutil.NoSuchProcess, psutil.AccessDenied, psutil.ZombieProcess):
        return False
    named = environ.get("MEMORYHUB_DATA_DIR")
    if named and Path(named).resolve() == datadir:
        return True
    return any(marker in value for value in environ.values() for marker in markers)


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
