"""Load held, faults survived, nothing lost: people and agents write and search
over MCP while, one at a time, the Celery worker is SIGKILLed mid-batch, Redis
restarts, PostgreSQL restarts (fast shutdown) and the ASGI process restarts.

After each: every write answered as done is present exactly once; every
fragment is embedded within 60 s; no answer was a 500 or took longer than the
tool deadline (an outage answers 503 with Retry-After, a tool error, or no
connection while the process is down); the server answers again without being
restarted. Figures for longer runs: bench/soak.py, docs/benchmarks.md.
"""

from __future__ import annotations

import pytest

from tests.support.faults import TOOL_DEADLINE, Stack, run_fault

pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def stack(tmp_path_factory):
    running = Stack(tmp_path_factory.mktemp("faults") / "data")
    running.start(people=3, agents=1)
    yield running
    running.stop()


@pytest.mark.parametrize("fault", ["kill worker", "restart redis", "restart postgres", "restart web"])
def test_a_fault_loses_nothing_and_the_server_recovers(stack, fault):
    report = run_fault(stack, fault, before=4.0, after=10.0)
    print(report.row())
    assert report.writes_done > 0
    assert report.writes_lost == 0 and report.writes_doubled == 0, report
    assert report.unembedded_after == 0, report
    assert "500" not in report.by_status, report
    assert set(report.by_status) <= {"200", "201", "tool-error", "503", "no-connection"}, report
    assert report.slowest < TOOL_DEADLINE + 5, report
    assert report.recovery < float("inf"), report
