"""Session plumbing: the data folder's embedded PostgreSQL (unless
DATABASE_URL points elsewhere, and Redis unless REDIS_URL does) is used for
the run and released after it, stopping when no other live process uses it;
the embedder's one-time preparation is done before any test, as
`./dev serve` does before serving, so no test's deadline pays for it."""

from __future__ import annotations

import pytest

from memoryhub.runtime import embedded
from memoryhub.runtime.commands import embedded_services

_used: list = []


def pytest_sessionstart(session: pytest.Session) -> None:
    for service in embedded_services():
        embedded.use(service)
        _used.append(service)
    from memoryhub.embeddings import prepare_embedder

    prepare_embedder()


def pytest_sessionfinish(session: pytest.Session, exitstatus: int) -> None:
    if _used:
        from django.db import connections

        connections.close_all()
    while _used:
        embedded.release(_used.pop())
