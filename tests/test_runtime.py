"""On the embedded defaults every process of a data folder (the server, its
workers, a command run beside it, the test session) shares one PostgreSQL and
one Redis, and nothing stops them while a live process still uses them.

Before: a command beside `./dev serve` used the machine's Redis at
127.0.0.1:6379 instead of the server's private one (its tasks went where no
worker listened); a command that started the embedded PostgreSQL stopped it on
exit even when the server had come to share it; the private Redis kept
nothing across a restart.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest
import redis

from memoryhub.runtime import embedded
from memoryhub.runtime.leaks import leftover_processes
from tests.conftest import poll

ROOT = Path(__file__).resolve().parents[1]
pytestmark = pytest.mark.slow

USER = textwrap.dedent("""
    import signal, sys, time
    from pathlib import Path
    from memoryhub.runtime import embedded
    datadir = Path(sys.argv[1])
    services = [embedded.EmbeddedPostgres(datadir), embedded.EmbeddedRedis(datadir)]
    for service in services:
        embedded.use(service)
    stop = []
    signal.signal(signal.SIGTERM, lambda *_: stop.append(1))
    print("using", flush=True)
    while not stop:
        time.sleep(0.05)
    for service in reversed(services):
        embedded.release(service)
    print("released", flush=True)
""")


def environment(datadir: Path) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if k not in ("DATABASE_URL", "REDIS_URL", "DATABASE_TEST_NAME")}
    env["MEMORYHUB_DATA_DIR"] = str(datadir)
    return env


def user(datadir: Path) -> subprocess.Popen:
    """A process that uses the data folder's services until SIGTERM (as `./dev serve` does)."""
    process = subprocess.Popen([sys.executable, "-c", USER, str(datadir)], cwd=ROOT, env=environment(datadir),
                               stdout=subprocess.PIPE, text=True)
    assert process.stdout is not None and process.stdout.readline().strip() == "using"
    return process


def command(datadir: Path, *args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "manage.py", *args], cwd=ROOT, env=environment(datadir),
                          capture_output=True, text=True, timeout=300, check=True)


def running(datadir: Path) -> tuple[bool, bool]:
    return embedded.EmbeddedPostgres(datadir).is_running(), embedded.EmbeddedRedis(datadir).is_running()


@pytest.fixture
def datadir(tmp_path):
    path = (tmp_path / "data").resolve()
    yield path
    for service in (embedded.EmbeddedRedis(path), embedded.EmbeddedPostgres(path)):
        service.stop()
    assert leftover_processes(path) == []


def test_a_command_beside_the_server_uses_its_services_and_leaves_them_running(datadir):
    server = user(datadir)
    try:
        command(datadir, "migrate", "--noinput")
        command(datadir, "create_workspace", "acme")
        assert running(datadir) == (True, True)
        # The command's settings point at the server's private Redis, not the machine's.
        shown = command(datadir, "shell", "-c", "from django.conf import settings; print(settings.REDIS_URL)")
        assert shown.stdout.strip().splitlines()[-1] == embedded.redis_url(datadir)
    finally:
        server.send_signal(signal.SIGTERM)
        server.wait(60)
    assert running(datadir) == (False, False)
    assert leftover_processes(datadir) == []


def test_the_first_user_leaving_does_not_stop_what_a_later_one_still_uses(datadir):
    first = user(datadir)  # say, a long `manage.py ingest` started before the server
    second = user(datadir)  # the server, which found them running
    first.send_signal(signal.SIGTERM)
    first.wait(60)
    assert running(datadir) == (True, True)
    second.send_signal(signal.SIGTERM)
    second.wait(60)
    assert running(datadir) == (False, False)


def test_a_killed_user_does_not_keep_the_services_running_for_ever(datadir):
    killed = user(datadir)
    killed.send_signal(signal.SIGKILL)
    killed.wait(30)
    assert running(datadir) == (True, True)
    last = user(datadir)
    last.send_signal(signal.SIGTERM)
    last.wait(60)
    assert running(datadir) == (False, False)


def test_the_private_redis_keeps_its_queue_across_a_restart(datadir):
    service = embedded.EmbeddedRedis(datadir)
    embedded.use(service)
    try:
        client = redis.Redis.from_url(service.url)
        client.lpush("memoryhub", "a queued task")
        # appendfsync everysec: the write is on disk within a second.
        poll(lambda: (service.redis_dir / "appendonlydir").exists(), timeout=10, what="the append-only file")
    finally:
        embedded.release(service)
    assert not service.is_running()
    embedded.use(service)
    try:
        assert redis.Redis.from_url(service.url).lrange("memoryhub", 0, -1) == [b"a queued task"]
    finally:
        embedded.release(service)
