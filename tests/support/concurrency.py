"""Two transactions at once, on two connections: one kept open while the
other runs, shown waiting on a lock before the first commits."""

from __future__ import annotations

import threading
from collections.abc import Callable
from typing import Any

from django.db import connection, connections, transaction

from tests.conftest import poll


def waiting_on_a_lock(thread_pid: list[int]) -> bool:
    with connection.cursor() as cursor:
        cursor.execute("SELECT wait_event_type FROM pg_stat_activity WHERE pid = %s", thread_pid)
        row = cursor.fetchone()
    return row is not None and row[0] == "Lock"


def in_thread(target) -> tuple[threading.Thread, list]:  # type: ignore[no-untyped-def]
    outcome: list = []

    def run() -> None:
        try:
            outcome.append(target())
        except BaseException as exc:  # noqa: BLE001 - handed to the test
            outcome.append(exc)
        finally:
            connections.close_all()

    thread = threading.Thread(target=run)
    thread.start()
    return thread, outcome


def one_held_open_then_another(held: Callable[[], Any], then: Callable[[], Any]) -> tuple[list, list]:
    """`held` in a transaction kept open, then `then` on another connection:
    once `then` waits on a lock, `held` commits. Both outcomes."""
    done, commit = threading.Event(), threading.Event()
    pid: list[int] = []

    def first() -> Any:
        with transaction.atomic():
            result = held()
            done.set()
            assert commit.wait(30)
        return result

    def second() -> Any:
        connection.ensure_connection()
        pid.append(connection.connection.info.backend_pid)
        return then()

    first_thread, first_outcome = in_thread(first)
    assert done.wait(30)
    second_thread, second_outcome = in_thread(second)
    poll(lambda: pid and waiting_on_a_lock(pid), what="the second to wait for the first")
    commit.set()
    first_thread.join(30)
    second_thread.join(30)
    return first_outcome, second_outcome
