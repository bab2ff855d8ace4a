"""The foundation: indexes, health endpoints, the embedded services' life cycle."""

from __future__ import annotations

import datetime as dt
import json
import os
import signal
import subprocess
import sys
import urllib.request
from pathlib import Path

import pytest
from django.db import connection

from memoryhub.runtime import embedded
from memoryhub.runtime.leaks import leftover_processes
from tests.conftest import free_port, poll

ROOT = Path(__file__).resolve().parent.parent


@pytest.mark.django_db
def test_it_has_the_hnsw_and_gin_indexes():
    with connection.cursor() as cursor:
        cursor.execute("SELECT indexname, indexdef FROM pg_indexes WHERE tablename = 'memoryhub_fragment'")
        indexes = dict(cursor.fetchall())
    assert "USING hnsw (embedding vector_cosine_ops)" in indexes["fragment_embedding_hnsw"]
    assert "USING gin (search_vector)" in indexes["fragment_search_vector_gin"]


@pytest.mark.django_db
def test_it_runs_on_postgresql_with_pgvector():
    assert connection.vendor == "postgresql"
    with connection.cursor() as cursor:
        cursor.execute("SELECT extversion FROM pg_extension WHERE extname = 'vector'")
        assert cursor.fetchone()[0].startswith("0.8")


def _get(url: str) -> tuple[int, dict]:
    try:
        with urllib.request.urlopen(url, timeout=30) as response:
            return response.status, json.loads(response.read())
    except urllib.error.HTTPError as exc:
        return exc.code, json.loads(exc.read())


def leaks_check(datadir: Path) -> tuple[int, str]:
    """`python -m memoryhub.runtime.leaks DATADIR`, as ./dev runs it after the tests."""
    result = subprocess.run([sys.executable, "-m", "memoryhub.runtime.leaks", str(datadir)], cwd=ROOT,
                            capture_output=True, text=True, timeout=60)
    return result.returncode, result.stdout + result.stderr


def test_healthz_answers_when_the_process_is_up(asgi_server):
    status, body = _get(f"{asgi_server.url}/healthz")
    assert (status, body) == (200, {"status": "ok"})


def test_readyz_reports_each_dependency(asgi_server):
    status, body = _get(f"{asgi_server.url}/readyz")
    assert status == 200, body
    assert set(body["checks"]) == {"database", "redis", "embedder", "enrichment", "tallies", "read_pool"}
    assert all(check["ok"] for check in body["checks"].values())
    assert body["checks"]["read_pool"]["detail"] == "no replica configured: every read on the primary"
    assert body["status"] == "ready"


def test_readyz_reports_a_backlog_of_enrichment_as_degraded(asgi_server, live_people, settings):
    from django.utils import timezone

    from memoryhub.models import Fragment
    from memoryhub.services.ingest import fragment_ingest

    fragment, _ = fragment_ingest(source=live_people.wiki, value="Waiting for a worker that never came.")
    Fragment.objects.filter(pk=fragment.pk).update(
        embedding=None, recorded_at=timezone.now() - dt.timedelta(seconds=3 * settings.MEMORYHUB_SWEEP_SECONDS))
    status, body = _get(f"{asgi_server.url}/readyz")
    assert (status, body["status"]) == (200, "degraded"), body
    assert body["checks"]["enrichment"]["degraded"] is True
    assert body["checks"]["enrichment"]["detail"].startswith("1 fragments wait")


def test_readyz_reports_search_tallies_left_unfolded_as_degraded(asgi_server, live_people, settings):
    from django.utils import timezone

    from memoryhub.models import FragmentTally
    from memoryhub.services.tallies import fold_tallies

    def tallies_check() -> dict:
        status, body = _get(f"{asgi_server.url}/readyz")
        assert status == 200, body
        return body["checks"]["tallies"]

    assert tallies_check()["detail"] == "folded"
    # Two rows of one home that no beat folded (a home with one row is folded already).
    stale = timezone.now() - dt.timedelta(seconds=3 * settings.MEMORYHUB_SWEEP_SECONDS)
    for fragments in (2, -1):
        FragmentTally.objects.create(tenant_id=live_people.acme.pk, collection_id=999_999, fragments=fragments,
                                     words=10 * fragments, measured=fragments, added_at=stale)
    check = tallies_check()
    assert check["degraded"] is True
    assert check["detail"].startswith("1 homes' search tallies have waited to be folded") and "beat" in check["detail"]
    assert fold_tallies() == 1
    assert "degraded" not in tallies_check()


def test_readyz_says_which_dependency_failed(asgi_server, settings):
    # Django rebuilds its cache handlers when CACHES changes (setting_changed).
    settings.CACHES = {
        "default": {"BACKEND": "django.core.cache.backends.redis.RedisCache", "LOCATION": "redis://127.0.0.1:1/0"}
    }
    status, body = _get(f"{asgi_server.url}/readyz")
    assert status == 503
    assert body["status"] == "unavailable"
    assert body["checks"]["redis"]["ok"] is False
    assert body["checks"]["database"]["ok"] is True


def test_settings_refuse_a_non_postgres_database_url():
    result = subprocess.run(
        [sys.executable, "-c", "import memoryhub.settings"],
        env={**os.environ, "DATABASE_URL": "sqlite:///x.db"}, capture_output=True, text=True, cwd=ROOT,
    )
    assert result.returncode != 0
    assert "PostgreSQL with pgvector only" in result.stderr


def _database_settings(**env: str) -> dict:
    code = ("import json; from memoryhub import settings as s; d = s.DATABASES['default']; "
            "print(json.dumps({'pool': d['OPTIONS'].get('pool'), 'age': d['CONN_MAX_AGE']}))")
    result = subprocess.run([sys.executable, "-c", code], env={**os.environ, **env}, capture_output=True, text=True,
                            cwd=ROOT, check=True)
    return json.loads(result.stdout)


def test_each_process_pools_its_database_connections_by_default():
    """Django's advice under ASGI: a pool, not persistent connections (bench/bench_mcp.py measured why)."""
    env = {"DATABASE_CONN_MAX_AGE": "60"}  # ignored while the pool is on: Django refuses both at once
    threads = min(32, (os.cpu_count() or 1) + 4)  # asgiref's worker threads
    assert _database_settings(**env) == {"pool": {"min_size": 1, "max_size": threads + 4, "timeout": 10.0}, "age": 0}
    assert _database_settings(DATABASE_POOL_MAX_SIZE="30", **env)["pool"]["max_size"] == 30
    assert _database_settings(DATABASE_POOL="0", **env) == {"pool": None, "age": 60}


def _read_settings(**env: str) -> dict:
    code = ("import json; from memoryhub import settings as s; aliases = s.MEMORYHUB_READ_REPLICAS; "
            "print(json.dumps({'replicas': aliases, 'databases': {alias: s.DATABASES[alias] for alias in aliases}, "
            "'routers': s.DATABASE_ROUTERS}))")
    result = subprocess.run([sys.executable, "-c", code], env={**os.environ, **env}, capture_output=True, text=True,
                            cwd=ROOT, check=True)
    return json.loads(result.stdout)


def test_read_replicas_are_configured_from_their_urls():
    """DATABASE_READ_URLS: one alias a replica, each on the primary's options,
    a short wait for a connection, and in the tests the primary's database;
    none by default."""
    assert _read_settings(DATABASE_READ_URLS="")["replicas"] == []
    read = _read_settings(DATABASE_READ_URLS=" postgresql://reader:s%40cret@replica-a:6432/memory?sslmode=require ,"
                                             "postgresql://reader@/memory?host=/run/pg-b&port=5433",
                          DATABASE_READ_CONNECT_TIMEOUT_SECONDS="3", DATABASE_PREPARED_STATEMENTS="0")
    assert read["replicas"] == ["replica1", "replica2"]
    assert read["routers"] == ["memoryhub.database.replicas.ReadRouter"]
    first, second = read["databases"]["replica1"], read["databases"]["replica2"]
    assert (first["HOST"], first["PORT"], first["USER"], first["PASSWORD"], first["NAME"]) == (
        "replica-a", "6432", "reader", "s@cret", "memory")
    assert first["OPTIONS"]["sslmode"] == "require" and first["OPTIONS"]["connect_timeout"] == 3
    assert (first["OPTIONS"]["keepalives"], first["OPTIONS"]["tcp_user_timeout"]) == (1, 15000)
    assert first["OPTIONS"]["prepared_statements"] is False
    assert first["OPTIONS"]["pool"]["min_size"] == 0 and first["OPTIONS"]["pool"]["timeout"] == 3.0
    assert first["TEST"] == {"MIRROR": "default"}
    assert (second["OPTIONS"]["host"], second["OPTIONS"]["port"]) == ("/run/pg-b", "5433")
    # The primary's own connect timeout is the primary's: a replica's is its own setting, unless its URL says.
    with_primary = _read_settings(DATABASE_URL="postgresql://u@h/m?connect_timeout=9",
                                  DATABASE_READ_URLS="postgresql://r@h/m,postgresql://r@h/m?connect_timeout=4")
    assert [with_primary["databases"][alias]["OPTIONS"]["connect_timeout"] for alias in ("replica1", "replica2")] == [
        2, "4"]
    assert "pool" not in _read_settings(DATABASE_READ_URLS="postgresql://r@h/m", DATABASE_POOL="0")["databases"][
        "replica1"]["OPTIONS"]
    refused = subprocess.run([sys.executable, "-c", "import memoryhub.settings"], capture_output=True, text=True,
                             env={**os.environ, "DATABASE_READ_URLS": "mysql://r@h/m"}, cwd=ROOT)
    assert refused.returncode != 0 and "DATABASE_READ_URLS must hold postgres:// URLs" in refused.stderr


def test_a_forked_worker_child_leaves_its_parents_pool_alone(transactional_db):
    """What Celery's worker_process_init runs in a prefork child: the inherited pool is
    forgotten (never closed: its sockets are the parent's) and the child opens its own."""
    from django.db import connection

    from memoryhub.celery import _forget_inherited_database_pools

    connection.ensure_connection()
    inherited = connection.pool
    assert inherited is not None
    _forget_inherited_database_pools()
    try:
        assert not inherited.closed
        assert connection.pool is not inherited
        connection.close()
        with connection.cursor() as cursor:
            cursor.execute("SELECT 1")
            assert cursor.fetchone() == (1,)
    finally:
        inherited.close()


def test_embedded_postgres_start_is_idempotent_and_stop_is_clean(tmp_path):
    server = embedded.EmbeddedPostgres(tmp_path / "data")
    assert server.start() is True
    try:
        assert server.start() is False  # already running: not ours to start again
        assert server.is_running()
    finally:
        server.stop()
    assert not server.is_running()
    assert leftover_processes(tmp_path / "data") == []
    datadir = (tmp_path / "data").resolve()
    assert leaks_check(datadir) == (0, f"no PostgreSQL, Redis or Celery worker of ours left running for {datadir}\n")


def test_a_celery_worker_left_running_is_found_by_the_data_folder_in_its_environment(tmp_path):
    """A worker a test starts names only its queue on its command line; left
    running, it would answer a later run's broadcasts. The check finds it by
    the data folder its environment names, and leaves alone a worker of
    another folder and any other process of this one."""
    datadir = (tmp_path / "data").resolve()
    worker = [sys.executable, "-m", "celery", "-A", "memoryhub", "worker", "--pool", "solo", "--queues",
              "leak-check", "--without-heartbeat", "--without-gossip", "--without-mingle"]
    # Not a worker, though its command line names celery.
    other = [sys.executable, "-c", "import time; time.sleep(120)", "memoryhub/celery.py", "worker"]
    # Relative to its own folder, as a worker started elsewhere would name it.
    ours = {"MEMORYHUB_DATA_DIR": "data"}
    # A broker nobody answers on: the worker must take no task and answer no broadcast of this run.
    nowhere = {"CELERY_BROKER_URL": "redis://127.0.0.1:1/0", "CELERY_RESULT_BACKEND": "redis://127.0.0.1:1/0"}
    started = [subprocess.Popen(argv, cwd=cwd, env={**os.environ, **nowhere, **env, "PYTHONPATH": str(ROOT)},
                                stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
               for argv, cwd, env in ((worker, tmp_path, ours), (worker, ROOT, ours), (other, tmp_path, ours))]
    try:
        found = leftover_processes(datadir)
        assert [line.split(":")[0] for line in found] == [str(started[0].pid)], found
        status, report = leaks_check(datadir)
        assert status == 1 and f"left running: {started[0].pid}: " in report and "leak-check" in report, report
    finally:
        for process in started:
            process.kill()
            process.wait(30)
    assert leftover_processes(datadir) == []
    assert leaks_check(datadir)[0] == 0


def _serving(tmp_path) -> tuple[subprocess.Popen, Path]:  # type: ignore[type-arg]
    """`serve` on the embedded defaults in a data folder of its own, once it answers /readyz."""
    datadir = tmp_path / "serve"
    port = free_port()
    env = {k: v for k, v in os.environ.items() if k not in ("DATABASE_URL", "REDIS_URL")}
    env.update(MEMORYHUB_DATA_DIR=str(datadir), MEMORYHUB_TASK_QUEUE=f"serve-test-{port}")
    proc = subprocess.Popen(
        [sys.executable, "-m", "memoryhub.runtime.serve", "--port", str(port)], cwd=ROOT, env=env,
        stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
    )

    def ready() -> bool:
        if proc.poll() is not None:
            raise AssertionError(f"serve exited early:\n{proc.stdout.read()}")
        try:
            return _get(f"http://127.0.0.1:{port}/readyz")[0] == 200
        except OSError:
            return False

    try:
        poll(ready, timeout=240, interval=0.5, what="serve to be ready")
    except BaseException:
        proc.kill()
        proc.wait()
        raise
    return proc, datadir


@pytest.mark.slow
@pytest.mark.parametrize("sig", [signal.SIGTERM, signal.SIGINT])
def test_serve_leaves_no_process_behind(tmp_path, sig):
    proc, datadir = _serving(tmp_path)
    try:
        # The private Redis and PostgreSQL are really up while it serves.
        assert leftover_processes(datadir), "expected our PostgreSQL and Redis to be running"
        status, report = leaks_check(datadir)
        assert status == 1 and "left running:" in report, report
        proc.send_signal(sig)
        output, _ = proc.communicate(timeout=90)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    assert proc.returncode == 0, output
    assert "memoryhub is running" in output
    assert "workspace 'demo'  login 'ada'" in output
    assert leftover_processes(datadir) == []
    assert leaks_check(datadir)[0] == 0


@pytest.mark.slow
def test_a_worker_killed_outright_takes_its_pool_and_beat_with_it(tmp_path):
    # SIGKILL (the kernel's out-of-memory killer, an operator's kill -9) leaves a Celery worker's beat and
    # pool processes orphaned unless they are stopped as a group: they ran on, holding connections.
    import psutil

    proc, datadir = _serving(tmp_path)
    try:
        worker = next(child for child in psutil.Process(proc.pid).children()
                      if "celery" in " ".join(child.cmdline()))
        assert worker.children(), "the worker runs its beat and pool as processes of their own"
        worker.kill()
        output, _ = proc.communicate(timeout=90)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    assert proc.returncode == 1 and "a server process exited; stopping" in output, output
    assert leftover_processes(datadir) == []
