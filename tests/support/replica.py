"""A real streaming replica of the test database's PostgreSQL, made with the
embedded PostgreSQL's own binaries (`pg_basebackup -R` into a second data
folder, started on a second port), and served to this process as a read
replica alias, as DATABASE_READ_URLS would configure it."""

from __future__ import annotations

import atexit
import contextlib
import os
import shutil
import subprocess
import tempfile
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import psycopg

from memoryhub.runtime import embedded
from tests.conftest import free_port, poll
from tests.support.processes import database_url

SECONDS = 120
SLOT_PREFIX = "memoryhub_test_standby_"


@dataclass
class Replica:
    """A hot standby of the primary the tests' database lives on."""

    primary: dict[str, Any]  # the primary's Django settings (default alias)
    port: int = field(default_factory=free_port)
    promoted: bool = False
    slot: str = ""
    # Beside the data folder's own PostgreSQL, named after it: a standby a killed run left behind is
    # one of the data folder's leftover processes (memoryhub.runtime.leaks), as its primary would be.
    folder: Path = field(default_factory=lambda: Path(tempfile.mkdtemp(
        prefix=f"{embedded.postgres_dir().name}-standby-", dir=embedded.postgres_dir().parent)))
    # Unix socket paths are short: under /tmp.
    socket_dir: Path = field(default_factory=lambda: Path(tempfile.mkdtemp(prefix="mh-standby-")))

    @property
    def pgdata(self) -> Path:
        return self.folder / "data"

    def url(self) -> str:
        """The replica's DATABASE_READ_URLS entry for the tests' database."""
        return database_url({**self.primary, "HOST": str(self.socket_dir), "PORT": str(self.port)})

    def create(self) -> Replica:
        """Copy the primary (pg_basebackup -R: standby.signal and its
        primary_conninfo written) and start the copy as a hot standby."""
        # The binaries run as the embedded server's owner when we are root: the folder is theirs.
        embedded._chown_for_owner(self.folder)
        embedded._chown_for_owner(self.socket_dir)
        primary_host = self.primary["HOST"] or self.primary["OPTIONS"].get("host", "")
        primary_port = str(self.primary.get("PORT") or self.primary["OPTIONS"].get("port") or 5432)
        with self._primary() as primary:
            # Slots of standbys a killed run left behind hold WAL on the primary for ever (a live
            # process's, stopped for a while, are its own).
            for (slot,) in primary.execute("SELECT slot_name FROM pg_replication_slots WHERE slot_name LIKE %s "
                                           "AND NOT active", [f"{SLOT_PREFIX}%"]).fetchall():
                if not Path(f"/proc/{slot.rsplit('_', 1)[-1]}").exists():
                    primary.execute("SELECT pg_drop_replication_slot(%s)", [slot])
        # A slot of its own: the primary keeps the WAL it has not replayed, through a stop and a start.
        self.slot = f"{SLOT_PREFIX}{self.port}_{os.getpid()}"
        atexit.register(self.remove)
        self._tool("pg_basebackup", "-h", primary_host, "-p", primary_port, "-U", self.primary["USER"] or "postgres",
                   "-D", str(self.pgdata), "-R", "-C", "-S", self.slot, "-X", "stream", "-c", "fast", "--no-sync")
        with self._primary() as primary:
            # A hot standby needs at least the primary's max_connections.
            max_connections = primary.execute("SHOW max_connections").fetchone()[0]
        self.options = (f"-h '' -k {self.socket_dir} -p {self.port} -c max_connections={max_connections} "
                        "-c fsync=off -c hot_standby=on -c wal_receiver_status_interval=1")
        self.start()
        return self

    def start(self) -> None:
        self._tool("pg_ctl", "-w", "-t", str(SECONDS), "-o", self.options, "-l", str(self.folder / "server.log"),
                   "-D", str(self.pgdata), "start")

    def stop(self, mode: str = "fast") -> None:
        if self.running():
            self._tool("pg_ctl", "-w", "-t", str(SECONDS), "-m", mode, "-D", str(self.pgdata), "stop")

    def running(self) -> bool:
        return (self.pgdata / "postmaster.pid").exists()

    def promote(self) -> None:
        """Promote the standby: it stops replaying the primary and takes writes of its own."""
        self.promoted = True
        self._tool("pg_ctl", "-w", "-t", str(SECONDS), "-D", str(self.pgdata), "promote")

    def pause(self) -> None:
        """Hold replay where it is: the standby stays up, answering, behind."""
        with self.admin() as conn:
            conn.execute("SELECT pg_wal_replay_pause()")
            poll(lambda: conn.execute("SELECT pg_get_wal_replay_pause_state()").fetchone()[0] == "paused",
                 timeout=SECONDS, what="replay to pause")

    def resume(self) -> None:
        with self.admin() as conn:
            conn.execute("SELECT pg_wal_replay_resume()")

    def replayed(self) -> int:
        with self.admin() as conn:
            return int(conn.execute("SELECT pg_last_wal_replay_lsn() - '0/0'::pg_lsn").fetchone()[0])

    def catch_up(self) -> None:
        """Wait until the standby has replayed everything the primary wrote so far."""
        with self._primary() as primary:
            target = int(primary.execute("SELECT pg_current_wal_insert_lsn() - '0/0'::pg_lsn").fetchone()[0])
        poll(lambda: self.replayed() >= target, timeout=SECONDS, what="the replica to catch up")

    def remove(self) -> None:
        """Stop it, drop its slot on the primary and its folder; again is nothing."""
        with contextlib.suppress(Exception):
            self.stop("immediate")
        if self.slot:
            with contextlib.suppress(Exception), self._primary() as primary:
                poll(lambda: not primary.execute("SELECT active FROM pg_replication_slots WHERE slot_name = %s",
                                                 [self.slot]).fetchone()[0], timeout=30, what="the slot to be free")
                primary.execute("SELECT pg_drop_replication_slot(%s)", [self.slot])
            self.slot = ""
        shutil.rmtree(self.folder, ignore_errors=True)
        shutil.rmtree(self.socket_dir, ignore_errors=True)

    @contextlib.contextmanager
    def admin(self) -> Iterator[psycopg.Connection]:
        with psycopg.connect(host=str(self.socket_dir), port=self.port, dbname="postgres",
                             user=self.primary["USER"] or "postgres", autocommit=True) as conn:
            yield conn

    @contextlib.contextmanager
    def _primary(self) -> Iterator[psycopg.Connection]:
        with psycopg.connect(host=self.primary["HOST"] or self.primary["OPTIONS"].get("host", ""),
                             port=self.primary.get("PORT") or self.primary["OPTIONS"].get("port") or 5432,
                             dbname="postgres", user=self.primary["USER"] or "postgres", autocommit=True) as conn:
            yield conn

    def _tool(self, tool: str, *args: str) -> None:
        result = subprocess.run([str(embedded._bin_dir() / tool), *args], capture_output=True, text=True,
                                timeout=SECONDS, cwd="/", **embedded._run_as_owner())
        if result.returncode != 0:
            log = self.folder / "server.log"
            raise RuntimeError(f"{tool} failed ({result.returncode}): {result.stdout}{result.stderr}\n"
                               f"{log.read_text()[-2000:] if log.exists() else ''}")


def register(replica: Replica, alias: str) -> None:
    """`replica` as this process's database `alias`, configured as
    DATABASE_READ_URLS configures a read replica
    (memoryhub.settings.read_replica_database); reads go there only once
    MEMORYHUB_READ_REPLICAS names it. Django's test case must list `alias`
    among its databases (a mirror of the default: it flushes nothing there)."""
    from django.db import connections

    from memoryhub import settings as project_settings

    unregister(alias)
    connections.settings[alias] = connections.configure_settings({
        "default": connections.settings["default"], alias: project_settings.read_replica_database(replica.url()),
    })[alias]


def unregister(alias: str) -> None:
    from django.db import connections

    if alias not in connections.settings:
        return
    with contextlib.suppress(Exception):
        connections[alias].close()
    with contextlib.suppress(Exception):
        connections[alias].close_pool()
    with contextlib.suppress(Exception):
        del connections[alias]
    connections.settings.pop(alias, None)
