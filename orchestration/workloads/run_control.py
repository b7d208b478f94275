"""How the discovery sensor ends runs: stop one with a reason (it drains on its own), or mark one
whose worker is gone as ended. Shared by the sensor's consumer and host runs and the rewind job."""

from __future__ import annotations

import logging

from dagster import DagsterInstance, DagsterRunStatus

from orchestration.workloads.discovery_model import FINISHED, Abandon, Cancel
from orchestration.workloads.names import stop_tags

__all__ = ["UNFINISHED", "abandon", "stop_run"]

UNFINISHED = [status for status in DagsterRunStatus if status not in FINISHED]


def abandon(instance: DagsterInstance, log: logging.Logger, abandon: Abandon) -> None:
    """Mark a run whose worker is gone as ended, with why, so the UI shows it ended."""
    message = (
        f"Lanehouse: no heartbeat from this run for {abandon.silent_for:.0f} s; its worker is "
        "gone (killed, out of memory or its machine lost). Its uncommitted records are consumed "
        "again by the next run."
    )
    try:
        run = instance.get_run_by_id(abandon.run_id)
        if run is None or run.is_finished:
            return
        if abandon.status == DagsterRunStatus.FAILURE:
            instance.report_run_failed(run, message)
        else:
            instance.report_run_canceled(run, message)
    except Exception as exc:  # retried next tick: the run is still unfinished in storage
        log.error(f"{abandon.workload}: could not mark run {abandon.run_id} ended: {exc!r}")


def stop_run(instance: DagsterInstance, log: logging.Logger, cancel: Cancel) -> None:
    """Tag the run with why, then stop it without waiting for it.

    A run that has not started is canceled through the run coordinator (the queue drops it). A
    started one is only marked CANCELING: its op reads its status every second and drains,
    commits and ends SUCCESS (:func:`orchestration.workloads.job.watch_run_status`). Asking
    the run launcher instead would block this tick: the Docker launcher's terminate waits for
    the container to exit (up to its stop timeout, 45 s in ``deploy/dagster.yaml``), and a few
    drains in one tick would exceed the sensor's time limit.
    """
    what = f"{cancel.workload}: run {cancel.run_id} ({cancel.reason})"
    try:
        instance.add_run_tags(cancel.run_id, stop_tags(cancel.run_id, cancel.reason))
        run = instance.get_run_by_id(cancel.run_id)
        if run is None or run.is_finished:
            return
        if run.status in (DagsterRunStatus.STARTING, DagsterRunStatus.STARTED):
            instance.report_run_canceling(run, message=f"Lanehouse: stopping ({cancel.reason})")
            return
        confirmed = instance.run_coordinator.cancel_run(cancel.run_id)
    except Exception as exc:  # one failed stop must not block the other workloads
        log.error(f"{what}: could not be stopped, retrying next tick: {type(exc).__name__}: {exc}")
        return
    if not confirmed:
        log.warning(
            f"{what}: Dagster did not confirm the termination; if the run stays CANCELING, "
            "terminate it from the UI (force termination marks it CANCELED)"
        )
