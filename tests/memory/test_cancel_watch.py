"""A read's deadline cancels the statement it is running through PostgreSQL's
cancel request, without a statement of its own (memoryhub.cancel_watch)."""

from __future__ import annotations

import threading
import time

import psycopg
import pytest
from django.db import OperationalError, connection

from memoryhub import cancel_watch


@pytest.fixture
def raw():  # type: ignore[no-untyped-def]
    """The test database's psycopg connection."""
    connection.ensure_connection()
    return connection.connection


def _cancelled(caught) -> None:  # type: ignore[no-untyped-def]
    """The statement (a pg_sleep(10)) failed as cancelled, and no statement
    timeout is set on its session: only a cancel request ends it so."""
    assert isinstance(caught.value.__cause__, psycopg.errors.QueryCanceled)
    with connection.cursor() as cursor:
        cursor.execute("SHOW statement_timeout")
        assert cursor.fetchone()[0] == "0"


def _wait_fired(watch: cancel_watch.Watch) -> None:
    deadline = time.monotonic() + 5
    while not watch.fired and time.monotonic() < deadline:
        time.sleep(0.01)
    assert watch.fired


def test_a_watch_past_its_deadline_cancels_once_and_one_ended_in_time_never():
    fired = threading.Event()
    calls: list[str] = []

    def cancel(name: str):  # type: ignore[no-untyped-def]
        def run() -> None:
            calls.append(name)
            fired.set()
        return run

    # Ended before its deadline, which then passes while the test goes on.
    with cancel_watch.watching(time.monotonic() + 0.1, cancel("in time")):
        pass
    with cancel_watch.watching(time.monotonic() + 0.05, cancel("late")) as watch:
        assert fired.wait(5)
    time.sleep(0.3)
    # Sent again while the block lasted, if it did; never once it ended, and never for the one in time.
    settled = len(calls)
    time.sleep(0.3)
    assert set(calls) == {"late"} and len(calls) == settled and watch.fired and not watch.active


def test_a_watch_does_not_end_while_its_cancel_is_being_sent():
    sending, sent = threading.Event(), threading.Event()

    def slow_cancel() -> None:
        sending.set()
        time.sleep(0.3)
        sent.set()

    with cancel_watch.watching(time.monotonic(), slow_cancel):
        assert sending.wait(5)
    # The block could only end once the cancel had gone: nothing issued after it can be hit.
    assert sent.is_set()


def test_a_slow_cancel_is_not_queued_behind_by_its_retries():
    """While one cancel is being sent, the retries that fall due start no
    thread to wait behind it: one cancel at a time per watch."""
    def slow_cancel() -> None:
        time.sleep(0.35)

    most = 0
    with cancel_watch.watching(time.monotonic(), slow_cancel) as watch:
        _wait_fired(watch)
        for _ in range(16):
            time.sleep(0.05)
            most = max(most, sum(1 for thread in threading.enumerate() if thread.name == "memoryhub-cancel"))
    assert 1 <= most <= 2


def test_a_failing_cancel_is_logged_and_the_watcher_goes_on(caplog):
    def broken() -> None:
        raise OSError("no route")

    with cancel_watch.watching(time.monotonic(), broken) as watch:
        _wait_fired(watch)
    assert "could not send the cancel request" in caplog.text
    later = threading.Event()
    with cancel_watch.watching(time.monotonic(), later.set):
        assert later.wait(5)


@pytest.mark.django_db(transaction=True)
def test_a_cancel_that_finds_the_connection_between_statements_is_dropped_by_postgresql(raw):
    with cancel_watch.watching(time.monotonic(), raw.cancel_safe) as watch:
        _wait_fired(watch)
    assert watch.fired
    time.sleep(0.2)
    with connection.cursor() as cursor:
        cursor.execute("SELECT pg_sleep(0.3), 1")
        assert cursor.fetchone()[1] == 1


@pytest.mark.django_db(transaction=True)
def test_a_statement_running_at_the_deadline_is_cancelled(raw):
    with cancel_watch.watching(time.monotonic() + 0.2, raw.cancel_safe), pytest.raises(OperationalError) as caught, \
            connection.cursor() as cursor:
        cursor.execute("SELECT pg_sleep(10)")
    _cancelled(caught)


@pytest.mark.django_db(transaction=True)
def test_a_statement_that_reached_the_server_after_the_first_cancel_is_cancelled_by_the_next(raw):
    with cancel_watch.watching(time.monotonic(), raw.cancel_safe) as watch:
        _wait_fired(watch)
        time.sleep(0.05)  # the first cancel found the connection idle and was dropped
        with pytest.raises(OperationalError) as caught, connection.cursor() as cursor:
            cursor.execute("SELECT pg_sleep(10)")
    _cancelled(caught)


@pytest.mark.django_db(transaction=True)
def test_no_statement_starts_after_a_reads_deadline():
    from memoryhub.errors import DeadlineExceeded
    from memoryhub.services.search import Deadline

    deadline = Deadline(0.2)
    with pytest.raises(DeadlineExceeded), deadline.watching():
        with connection.cursor() as cursor:
            cursor.execute("SELECT 1")
        time.sleep(0.3)
        with connection.cursor() as cursor:
            cursor.execute("SELECT 2")
    # Outside a watch nothing is checked.
    with connection.cursor() as cursor:
        cursor.execute("SELECT 3")
        assert cursor.fetchone() == (3,)
