"""Session plumbing: the embedded PostgreSQL is started for the run (unless
DATABASE_URL points elsewhere) and stopped after it, by whichever process
started it; the embedder's one-time preparation is done before any test, as
`./dev serve` does before serving, so no test's deadline pays for it."""

from __future__ import annotations

import pytest

from memoryhub.runtime.commands import uses_embedded_postgres

_started = {}


def pytest_sessionstart(session: pytest.Session) -> None:
    if uses_embedded_postgres():
        from memoryhub.runtime import embedded

        server = embedded.EmbeddedPostgres(embedded.data_dir())
        if server.start():
            _started["postgres"] = server
    from memoryhub.embeddings import prepare_embedder

    prepare_embedder()


def pytest_sessionfinish(session: pytest.Session, exitstatus: int) -> None:
    server = _started.pop("postgres", None)
    if server is not None:
        from django.db import connections

        connections.close_all()
        server.stop()
