"""Backing up and restoring the database with PostgreSQL's own tools.

On the embedded defaults the tools come with the bundled PostgreSQL 16; with
DATABASE_URL, the same bundled tools work against any server up to 16 (or set
MEMORYHUB_PG_BIN to a folder with the server's own pg_dump/pg_restore).
The archive is pg_dump's custom format: everything, the vectors and the
receipts included. Redis holds nothing that must survive (rate limits, the
cache, queued tasks, which the sweep rebuilds from the database).
"""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

from django.db import connections

from memoryhub.runtime import embedded


class BackupFailed(RuntimeError):
    pass


def _tool(name: str) -> str:
    folder = os.environ.get("MEMORYHUB_PG_BIN")
    return str(Path(folder) / name) if folder else str(embedded._bin_dir() / name)


def _connection_arguments(alias: str = "default") -> tuple[list[str], dict[str, str]]:
    settings_dict = connections[alias].settings_dict
    arguments = ["--dbname", settings_dict["NAME"], "--username", settings_dict["USER"] or "postgres"]
    if settings_dict.get("HOST"):
        arguments += ["--host", settings_dict["HOST"]]
    if settings_dict.get("PORT"):
        arguments += ["--port", str(settings_dict["PORT"])]
    env = {**os.environ}
    if settings_dict.get("PASSWORD"):
        env["PGPASSWORD"] = settings_dict["PASSWORD"]
    return arguments, env


def _run(command: list[str], env: dict[str, str]) -> None:
    result = subprocess.run(command, env=env, capture_output=True, text=True, timeout=3600, check=False)
    if result.returncode != 0:
        raise BackupFailed(f"{Path(command[0]).name} failed ({result.returncode}): {result.stderr.strip()[-2000:]}")


def backup(path: Path) -> int:
    """Write the whole database to `path` (pg_dump custom format); returns its size."""
    arguments, env = _connection_arguments()
    path.parent.mkdir(parents=True, exist_ok=True)
    partial = path.with_name(path.name + ".partial")
    _run([_tool("pg_dump"), "--format=custom", "--no-owner", "--file", str(partial), *arguments], env)
    partial.replace(path)  # a failed run never leaves a truncated archive under the real name
    return path.stat().st_size


def restore(path: Path) -> None:
    """Replace the database's contents with the archive at `path`. Stop the
    servers and workers first: the restore drops and recreates every table."""
    if not path.is_file():
        raise BackupFailed(f"No backup archive at {path}.")
    arguments, env = _connection_arguments()
    connections.close_all()
    _run([_tool("pg_restore"), "--clean", "--if-exists", "--no-owner", "--single-transaction",
          "--exit-on-error", *arguments, str(path)], env)
