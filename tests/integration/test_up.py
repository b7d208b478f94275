"""``lanehouse up`` for real: brokers, producers and ``dagster dev`` from a clean state dir; the
discovery sensor starts a consumer run per workload; SIGTERM takes everything down, consumer
runs first (CANCELED, tagged as stopped by the platform); a second ``up`` on the same state dir
starts them again."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.integration.platform_up import Up

pytestmark = pytest.mark.integration


def test_up_runs_every_workload_and_sigterm_stops_runs_first(tmp_path: Path) -> None:
    up = Up(tmp_path / "state")
    with up.running() as proc:
        up.wait_all_running()
        first = up.started()
        up.stop(proc)
    log = up.log()
    assert log.index("terminating 2 consumer run(s)") < log.index("dagster dev stopped")

    with up.running() as proc:  # the same state: the runs stopped by the platform come back
        up.wait_all_running()
        runs = {run["runId"]: run for run in up.runs()}
        for workload, run_id in first.items():
            assert runs[run_id]["status"] == "CANCELED", runs[run_id]
            assert runs[run_id]["tags"]["lanehouse/stop_reason"] == "platform"
            assert up.started()[workload] != run_id
        up.stop(proc)
