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
        argv = proc.info.get("cmdline") or []
        cmdline = " ".join(argv)
        if any(marker in cmdline for marker in markers) or (
                proc.info["pid"] not in own and _celery_for(proc, argv, datadir, markers)):
            found.append(f"{proc.info['pid']}: {cmdline[:200]}")
    return found


def _celery_for(proc: psutil.Process, argv: list[str], datadir: Path, markers: list[str]) -> bool:
    """A Celery worker or beat whose environment points at this data folder.
    A worker a test starts names only its queue on its command line: it finds
    the data folder, its database and its broker through its environment.
    Left running, it would take tasks and answer the broadcasts of a later run."""
    if not _is_celery(argv):
        return False
    try:
        environ, cwd = proc.environ(), proc.cwd()
    except (psutil.NoSuchProcess, psutil.AccessDenied, psutil.ZombieProcess):
        return False
    named = environ.get("MEMORYHUB_DATA_DIR")
    if named and (Path(cwd) / named).resolve() == datadir:
        return True
    return any(marker in value for value in environ.values() for marker in markers)


def _is_celery(argv: list[str]) -> bool:
    """`celery … worker|beat`, run as its script or as `python -m celery`."""
    for index, arg in enumerate(argv[:3]):
        if Path(arg).name == "celery" or (arg == "-m" and argv[index + 1:index + 2] == ["celery"]):
            return bool({"worker", "beat"} & set(argv))
    return False


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
