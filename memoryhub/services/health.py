"""Readiness: does each dependency answer right now?"""

from __future__ import annotations

import time
from collections.abc import Callable

from django.core.cache import cache
from django.db import connection


def _database() -> str:
    with connection.cursor() as cursor:
        cursor.execute("SELECT extversion FROM pg_extension WHERE extname = 'vector'")
        row = cursor.fetchone()
    if row is None:
        raise RuntimeError("the pgvector extension is not installed")
    return f"pgvector {row[0]}"


def _redis() -> str:
    cache.set("readyz", "1", 5)
    if cache.get("readyz") != "1":
        raise RuntimeError("Redis did not return what was written")
    return "ok"


def _embedder() -> str:
    from memoryhub.embeddings import get_embedder

    embedder = get_embedder()
    vector = embedder.embed(["readiness probe"])[0]
    if len(vector) != embedder.dimensions:
        raise RuntimeError("embedder returned a vector of the wrong size")
    return embedder.name


class Degraded(Exception):
    """Working, but behind: reported as degraded, not as unavailable."""


def _enrichment() -> str:
    import datetime as dt

    from django.conf import settings

    from memoryhub.services.enrichment import fragments_pending

    waiting = len(fragments_pending(older_than=dt.timedelta(seconds=2 * settings.MEMORYHUB_SWEEP_SECONDS),
                                    limit=10_000))
    if waiting:
        raise Degraded(f"{waiting} fragments wait for embedding or linking for over two sweep intervals "
                       "(is a Celery worker running?)")
    return "nothing pending"


def _tallies() -> str:
    import datetime as dt

    from django.conf import settings

    from memoryhub.services.tallies import tallies_unfolded

    waiting = tallies_unfolded(older_than=dt.timedelta(seconds=2 * settings.MEMORYHUB_SWEEP_SECONDS))
    if waiting:
        raise Degraded(f"{waiting} homes' search tallies have waited to be folded for over two sweep intervals, "
                       "and searches slow down as they pile up (is the Celery beat running?)")
    return "folded"


def _read_pool() -> str:
    from memoryhub.database import replicas

    states = replicas.report()
    if not states:
        return "no replica configured: every read on the primary"
    faults = [f"{alias} {replicas.SAID[reason]}" for alias, reason in states.items() if reason in replicas.DEGRADING]
    if faults:
        raise Degraded(f"reads a replica would serve go to the primary: {'; '.join(faults)}")
    return "; ".join(f"{alias} {'serving' if reason is None else replicas.SAID[reason]}"
                     for alias, reason in states.items())


CHECKS: dict[str, Callable[[], str]] = {
    "database": _database, "redis": _redis, "embedder": _embedder, "enrichment": _enrichment, "tallies": _tallies,
    "read_pool": _read_pool,
}


def readiness() -> dict[str, dict]:
    results: dict[str, dict] = {}
    for name, check in CHECKS.items():
        started = time.perf_counter()
        try:
            detail = check()
            results[name] = {"ok": True, "detail": detail}
        except Degraded as exc:
            results[name] = {"ok": True, "degraded": True, "detail": str(exc)}
        except Exception as exc:  # noqa: BLE001 - a readiness probe reports every failure as data
            results[name] = {"ok": False, "error": f"{type(exc).__name__}: {exc}"[:300]}
        results[name]["ms"] = round((time.perf_counter() - started) * 1000, 1)
    return results


# A probe slower than this still works, but a search would feel it.
PROBE_DEGRADED_AFTER_SECONDS = 2.0
PROBE_STATEMENT_TIMEOUT = "3s"


def read_probe(*, caller) -> str:  # type: ignore[no-untyped-def]
    """whoami's read_pool_ready: a real read under the caller's own rights (the
    visibility predicate a search would carry), sent where the caller's search
    would be (memoryhub.database.replicas), and the query embedder.
    'ready'; 'degraded': slow, search would answer lexically only, or reads
    fall back to the primary because a replica lags beyond its bound, does
    not answer or was promoted away (or failed under the probe); or
    'unavailable': the read failed."""
    import logging

    from memoryhub.database import replicas
    from memoryhub.embeddings import get_embedder
    from memoryhub.errors import MemoryhubError

    logger = logging.getLogger("memoryhub.health")
    started = time.monotonic()
    try:
        probe = replicas.served(lambda: _probe_read(caller))
    except MemoryhubError:
        return replicas.UNAVAILABLE
    except Exception:  # noqa: BLE001 - the probe reports a failing database as a state
        logger.exception("read-pool probe failed")
        return replicas.UNAVAILABLE
    try:
        get_embedder().embed(["probe"])
    except Exception:  # noqa: BLE001 - search answers lexically without the embedder
        logger.exception("read-pool probe: the embedder failed")
        return replicas.DEGRADED
    if probe.degraded or time.monotonic() - started > PROBE_DEGRADED_AFTER_SECONDS:
        return replicas.DEGRADED
    return replicas.READY


def _probe_read(caller) -> None:  # type: ignore[no-untyped-def]
    from django.db import transaction
    from django.utils import timezone

    from memoryhub import access
    from memoryhub.database.replicas import read_alias, read_connection

    with transaction.atomic(using=read_alias()):
        with read_connection.cursor() as cursor:
            cursor.execute("SELECT set_config('statement_timeout', %s, true)", [PROBE_STATEMENT_TIMEOUT])
        access.visible_fragments(access.read_policy(caller=caller, as_of=timezone.now())).exists()
