"""`python -m memoryhub.runtime.serve`: run the whole product on the embedded defaults.

Starts (unless configured elsewhere) the project's PostgreSQL and a private
Redis in the data folder, migrates, seeds the demo workspace, then runs the
ASGI server and a Celery worker until Ctrl-C or SIGTERM, and stops everything
it started.
"""

from __future__ import annotations

import argparse
import os
import signal
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

from memoryhub.runtime import embedded
from memoryhub.runtime.children import signal_group

ROOT = Path(__file__).resolve().parents[2]


def _wait_ready(url: str, children: list[subprocess.Popen], timeout: float = 180) -> bool:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if any(child.poll() is not None for child in children):
            return False
        try:
            with urllib.request.urlopen(url, timeout=5) as response:  # noqa: S310 - our own loopback URL
                if response.status == 200:
                    return True
        except OSError:
            pass
        time.sleep(0.5)
    return False


# The address `./dev serve` prints unless MEMORYHUB_HOST/MEMORYHUB_PORT say otherwise.
DEFAULT_HOST = "127.0.0.1"
DEFAULT_PORT = 8000


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--host", default=os.environ.get("MEMORYHUB_HOST", DEFAULT_HOST))
    parser.add_argument("--port", type=int, default=int(os.environ.get("MEMORYHUB_PORT", str(DEFAULT_PORT))))
    parser.add_argument("--no-demo", action="store_true", help="Do not create the demo workspace.")
    parser.add_argument("--workers", type=int, default=1, help="Celery worker concurrency.")
    parser.add_argument("--web-workers", type=int, default=None,
                        help="ASGI worker processes (default: MEMORYHUB_WORKERS, or one per core).")
    args = parser.parse_args(argv)

    datadir = embedded.data_dir()
    datadir.mkdir(parents=True, exist_ok=True)
    env = dict(os.environ)
    env.setdefault("DJANGO_SETTINGS_MODULE", "memoryhub.settings")
    env.setdefault("MEMORYHUB_BASE_URL", f"http://{args.host}:{args.port}")
    env["MEMORYHUB_DATA_DIR"] = str(datadir)

    postgres = None if env.get("DATABASE_URL") else embedded.EmbeddedPostgres(datadir)
    redis = None if env.get("REDIS_URL") else embedded.EmbeddedRedis(datadir)
    used: list[embedded.Service] = []
    children: list[subprocess.Popen] = []
    stopping = False

    def stop(signum: int, frame: object) -> None:
        nonlocal stopping
        stopping = True

    signal.signal(signal.SIGTERM, stop)
    signal.signal(signal.SIGINT, stop)
    try:
        # Shared with any command run beside the server; stopped when the last user releases them.
        if postgres is not None:
            embedded.use(postgres)
            used.append(postgres)
            print(f"PostgreSQL 16 + pgvector: {postgres.pgdata}", flush=True)
        if redis is not None:
            embedded.use(redis)
            used.append(redis)
            env["REDIS_URL"] = redis.url
            print(f"Redis: {redis.socket_path} (its queue kept in {redis.redis_dir})", flush=True)
        manage = [sys.executable, str(ROOT / "manage.py")]
        subprocess.run([*manage, "migrate", "--noinput"], env=env, check=True, cwd=ROOT)
        subprocess.run([*manage, "prepare_embedder"], env=env, check=True, cwd=ROOT)
        if not args.no_demo:
            subprocess.run([*manage, "seed_demo"], env=env, check=True, cwd=ROOT)
        # uvicorn with deadlines for slow clients and one worker per core (mcpapi.serving).
        web = [sys.executable, "-m", "mcpapi.serving", "memoryhub.asgi:application", "--host", args.host,
               "--port", str(args.port)]
        # Each child leads a process group of its own, so stopping it stops what it
        # started too (uvicorn's workers, Celery's pool and beat), even after the
        # child itself was killed outright.
        children.append(subprocess.Popen(
            web + (["--workers", str(args.web_workers)] if args.web_workers else []), env=env, cwd=ROOT,
            start_new_session=True,
        ))
        # The worker also runs the beat: the sweep re-enqueues what a lost task left pending.
        children.append(subprocess.Popen(
            [sys.executable, "-m", "celery", "-A", "memoryhub", "worker", "--beat", "--schedule",
             str(datadir / "celerybeat-schedule"), "--loglevel", "INFO", "--concurrency", str(args.workers),
             "--queues", env.get("MEMORYHUB_TASK_QUEUE", "memoryhub")],
            env=env, cwd=ROOT, start_new_session=True,
        ))
        base = env["MEMORYHUB_BASE_URL"]
        if _wait_ready(f"http://{args.host}:{args.port}/readyz", children):
            print(
                f"\nmemoryhub is running.\n  sign in:      {base}/accounts/login/\n"
                f"  review queue: {base}/reviews/\n  MCP endpoint: {base}/mcp  (read-only: {base}/mcp/readonly)\n"
                f"  connect:      {base}/connect/  (what to paste into each MCP client)\n"
                f"  health:       {base}/readyz\nPress Ctrl-C to stop.\n",
                flush=True,
            )
        while not stopping:
            if any(child.poll() is not None for child in children):
                print("a server process exited; stopping", file=sys.stderr, flush=True)
                return 1
            time.sleep(0.3)
        return 0
    except subprocess.CalledProcessError as exc:
        print(f"start-up failed: {exc}", file=sys.stderr)
        return 1
    finally:
        for child in children:
            signal_group(child, signal.SIGTERM)
        for child in children:
            try:
                child.wait(20)
            except subprocess.TimeoutExpired:
                signal_group(child, signal.SIGKILL)
                child.wait(5)
        # What a child started and left behind (its leader killed outright: a
        # Celery pool or beat process) goes too, then everything is waited for.
        for child in children:
            signal_group(child, signal.SIGKILL)
        while used:
            embedded.release(used.pop())
        print("stopped", flush=True)


if __name__ == "__main__":
    sys.exit(main())
