"""Starting and stopping the embedded services around a process's life."""

from __future__ import annotations

import contextlib
import os
from collections.abc import Iterator

from memoryhub.runtime import embedded


def uses_embedded_postgres() -> bool:
    return not os.environ.get("DATABASE_URL")


@contextlib.contextmanager
def embedded_postgres_for_command() -> Iterator[None]:
    """Run the block with the embedded PostgreSQL up; stop it after only if we started it.

    A command run while another process (say `./dev serve`) owns the server uses it and
    leaves it running; the owner stops it when it exits, even if others still use it."""
    if not uses_embedded_postgres():
        yield
        return
    server = embedded.EmbeddedPostgres(embedded.data_dir())
    started = server.start()
    try:
        yield
    finally:
        if started:
            server.stop()
