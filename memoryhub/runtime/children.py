"""Stopping child processes: the server's own (`serve`), and those tests and
benchmarks start."""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess


def signal_group(child: subprocess.Popen, signum: int) -> None:
    """`signum` to the process group `child` leads (start_new_session), whether
    or not `child` itself still runs."""
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(child.pid, signum)


def stop_child(child: subprocess.Popen | None, *, grace: float = 30, group: bool = False) -> None:
    """SIGTERM `child`, SIGKILL it if it lingers past `grace` seconds; with
    `group` (it leads its own process group), whatever of its group is left
    goes too."""
    if child is None:
        return
    try:
        if child.poll() is None:
            child.send_signal(signal.SIGTERM)
            try:
                child.wait(grace)
            except subprocess.TimeoutExpired:
                child.kill()
                child.wait(10)
    finally:
        if group:  # even when the child itself would not go
            signal_group(child, signal.SIGKILL)
