"""mcpapi.serving's processes: one worker per core, each told its share of the
cores and settling its heap once started."""

from __future__ import annotations

import gc
import os

import httpx2
import pytest

from mcpapi import serving
from tests.conftest import free_port, poll
from tests.support.processes import spawn_uvicorn, wait_healthy


@pytest.mark.parametrize(("cpus", "workers", "share"), [(2, 2, 1), (2, 1, 2), (8, 3, 2), (1, 4, 1), (4, 2, 2)])
def test_each_worker_gets_its_share_of_the_cores(monkeypatch, cpus: int, workers: int, share: int) -> None:
    monkeypatch.setattr(serving.os, "cpu_count", lambda: cpus)
    assert serving.cores_per_process(workers) == share


def _answering(url: str, workers: int) -> dict[int, dict]:
    """What each worker process reports (its share of the cores, its
    collector's state), once requests (each on a connection of its own) have
    reached every worker."""
    seen: dict[int, dict] = {}

    def every_worker_answered() -> bool:
        try:
            answer = httpx2.get(url, timeout=5, trust_env=False).json()
        except httpx2.HTTPError:
            return False
        seen[answer["pid"]] = answer
        return len(seen) >= workers

    poll(every_worker_answered, timeout=120, interval=0.01, what=f"{workers} worker(s) to answer")
    return seen


@pytest.mark.parametrize(("workers", "preset"), [(None, None), (1, None), (2, None), (2, "3"), (None, "3")])
def test_the_worker_processes_are_started_with_their_share_unless_one_is_set(tmp_path, workers, preset) -> None:
    """`python -m mcpapi.serving`, run for real: one worker per core by default,
    each told its share of the cores; one worker gets them all; a share set
    beforehand is kept. Every worker's heap is settled once it has started."""
    cores = os.cpu_count() or 1
    expected_workers = workers or cores
    env = _environment(tmp_path)
    if preset is not None:
        env[serving.CORES_PER_PROCESS] = preset
    port = free_port()
    process = spawn_uvicorn("plain", "tests.support.plain_app:app", port, env, tmp_path, workers=workers)
    try:
        wait_healthy(process, f"http://127.0.0.1:{port}")
        answers = _answering(f"http://127.0.0.1:{port}/", expected_workers)
    finally:
        process.stop()
    # Several workers are processes of their own; one alone is the server's.
    assert (list(answers) == [process.pid]) if expected_workers == 1 else (
        len(answers) == expected_workers and process.pid not in answers)
    assert {answer["share"] for answer in answers.values()} == {preset or str(max(1, cores // expected_workers))}
    assert all(answer["frozen"] > 0 and answer["young"] == 20000 for answer in answers.values()), answers


def _environment(tmp_path) -> dict[str, str]:  # type: ignore[no-untyped-def]
    env = {key: value for key, value in os.environ.items()
           if key not in (serving.CORES_PER_PROCESS, "MEMORYHUB_WORKERS", "PROMETHEUS_MULTIPROC_DIR",
                          serving.SETTLE_HEAP, serving.YOUNG_THRESHOLD)}
    env["PROMETHEUS_MULTIPROC_DIR"] = str(tmp_path)  # set: no metrics folder is made and left
    return env


@pytest.mark.parametrize(("settle", "frozen", "young"), [("0", False, None), ("1", True, 5000)])
def test_a_worker_settles_its_heap_as_configured(tmp_path, settle, frozen, young) -> None:
    """MEMORYHUB_SETTLE_HEAP=0 leaves the collector as Python has it (as this
    process has it); 1 settles it with the young generation's threshold set."""
    env = {**_environment(tmp_path), serving.SETTLE_HEAP: settle, serving.YOUNG_THRESHOLD: "5000"}
    port = free_port()
    process = spawn_uvicorn("plain", "tests.support.plain_app:app", port, env, tmp_path, workers=1)
    try:
        wait_healthy(process, f"http://127.0.0.1:{port}")
        (answer,) = _answering(f"http://127.0.0.1:{port}/", 1).values()
    finally:
        process.stop()
    assert (answer["frozen"] > 0, answer["young"]) == (frozen, young or gc.get_threshold()[0]), answer


@pytest.mark.parametrize("threshold", ["0", "-5", "20k", "1.5"])
def test_a_young_threshold_that_is_no_count_stops_the_server_before_it_starts(monkeypatch, capsys,
                                                                             threshold) -> None:
    """0 would stop the collector altogether; the server says what the setting
    must be, and starts nothing."""
    monkeypatch.setenv(serving.YOUNG_THRESHOLD, threshold)
    names = (serving.SETTLE_HEAP, serving.CORES_PER_PROCESS, "PROMETHEUS_MULTIPROC_DIR")
    before = {name: os.environ.get(name) for name in names}
    with pytest.raises(SystemExit) as stopped:
        serving.main(["tests.support.plain_app:app", "--port", str(free_port())])
    assert stopped.value.code == 2
    assert f"{serving.YOUNG_THRESHOLD} must be a whole number of at least 1" in capsys.readouterr().err
    assert {name: os.environ.get(name) for name in names} == before


@pytest.mark.parametrize(("text", "value"), [(None, 20000), ("", 20000), ("1", 1), ("700", 700), ("50000", 50000)])
def test_the_young_threshold_is_read_as_set(monkeypatch, text, value) -> None:
    if text is None:
        monkeypatch.delenv(serving.YOUNG_THRESHOLD, raising=False)
    else:
        monkeypatch.setenv(serving.YOUNG_THRESHOLD, text)
    assert serving.young_threshold() == value
