"""The embedded services around a process's life: a command (manage.py), a
benchmark or the test session uses the data folder's PostgreSQL and Redis,
starting them if needed, and releases them when it ends; they stop when their
last live user releases them (memoryhub.runtime.embedded.use / release). So a
command run beside `./dev serve` finds the server's database and queue, and
never stops them under it."""

from __future__ import annotations

import contextlib
import os
from collections.abc import Iterator

from memoryhub.runtime import embedded


def uses_embedded_postgres() -> bool:
    return not os.environ.get("DATABASE_URL")


def uses_embedded_redis() -> bool:
    return not os.environ.get("REDIS_URL")


def embedded_services() -> list[embedded.Service]:
    datadir = embedded.data_dir()
    services: list[embedded.Service] = []
    if uses_embedded_postgres():
        services.append(embedded.EmbeddedPostgres(datadir))
    if uses_embedded_redis():
        services.append(embedded.EmbeddedRedis(datadir))
    return services


@contextlib.contextmanager
def embedded_services_for_command() -> Iterator[None]:
    services = embedded_services()
    used = []
    try:
        for service in services:
            embedded.use(service)
            used.append(service)
        yield
    finally:
        for service in reversed(used):
            embedded.release(service)
