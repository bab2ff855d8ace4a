"""mcpapi.serving's processes: one worker per core, each told its share of the cores."""

from __future__ import annotations

import os
from typing import Any

import pytest
import uvicorn

from mcpapi import serving


@pytest.mark.parametrize(("cpus", "workers", "share"), [(2, 2, 1), (2, 1, 2), (8, 3, 2), (1, 4, 1), (4, 2, 2)])
def test_each_worker_gets_its_share_of_the_cores(monkeypatch, cpus: int, workers: int, share: int) -> None:
    monkeypatch.setattr(serving.os, "cpu_count", lambda: cpus)
    assert serving.cores_per_process(workers) == share


def test_the_workers_are_started_with_their_share_unless_one_is_set(monkeypatch, tmp_path) -> None:
    started: list[dict[str, Any]] = []
    monkeypatch.setattr(uvicorn, "run", lambda app, **options: started.append(
        {"workers": options["workers"], "share": os.environ.get(serving.CORES_PER_PROCESS)}))
    monkeypatch.setattr(serving.os, "cpu_count", lambda: 2)
    saved = dict(os.environ)
    try:
        for name in (serving.CORES_PER_PROCESS, "MEMORYHUB_WORKERS"):
            os.environ.pop(name, None)
        os.environ["PROMETHEUS_MULTIPROC_DIR"] = str(tmp_path)  # set: no metrics folder is made and left
        serving.main(["memoryhub.asgi:application"])
        os.environ.pop(serving.CORES_PER_PROCESS)
        serving.main(["memoryhub.asgi:application", "--workers", "1"])
        os.environ[serving.CORES_PER_PROCESS] = "2"
        serving.main(["memoryhub.asgi:application"])
    finally:
        os.environ.clear()
        os.environ.update(saved)
    assert started == [{"workers": 2, "share": "1"}, {"workers": 1, "share": "2"}, {"workers": 2, "share": "2"}]
