"""``lanehouse workloads list|status``: workloads as the Dagster instance and the engine see them.

Reads the instance directly (``$DAGSTER_HOME``, or ``<state dir>/dagster`` as ``lanehouse up``
sets it up), so it answers while the UI is down and works against PostgreSQL storage too.
Dagster (the instance, :mod:`orchestration.workloads.status`) is imported inside the commands:
``lanehouse --help`` stays fast.
"""

from __future__ import annotations

import functools
import json
import os
from datetime import datetime
from pathlib import Path
from typing import TYPE_CHECKING, Annotated

import typer
from rich.console import Console
from rich.table import Table
from rich.text import Text

from consumers.config.loading import state_dir as default_state_dir
from orchestration.console import print_error
from orchestration.workloads.names import workloads_dir

if TYPE_CHECKING:
    from collections.abc import Sequence

    from dagster import DagsterInstance

    from orchestration.workloads.progress import TopicProgress
    from orchestration.workloads.status import WorkloadStatus

#: Seconds to read a still workload's lag from its broker (all of them at once).
MEASURE_TIMEOUT = 2.0

workloads_app = typer.Typer(
    name="workloads",
    help="Show workloads with their consumer runs and the engine's last progress report.",
    no_args_is_help=True,
)

SpecsOption = Annotated[
    Path | None,
    typer.Option(
        "--specs",
        file_okay=False,
        show_default=False,
        help="Directory of workload specs (default $LANEHOUSE_WORKLOADS or workloads/).",
    ),
]
StateOption = Annotated[
    Path | None,
    typer.Option(
        file_okay=False,
        show_default=False,
        help="The platform's state dir; its dagster/ is the instance (default $DAGSTER_HOME, "
        "else $LANEHOUSE_HOME or .lanehouse).",
    ),
]
_JsonOption = Annotated[bool, typer.Option("--json", help="Print JSON instead of a table.")]


def instance_home(state_dir: Path | None) -> Path:
    """Where the instance ``lanehouse up`` runs on lives (it may not exist)."""
    if state_dir is None and os.environ.get("DAGSTER_HOME"):
        return Path(os.environ["DAGSTER_HOME"])
    return default_state_dir(state_dir) / "dagster"


def _instance(state_dir: Path | None) -> DagsterInstance:
    """The instance ``lanehouse up`` runs on; exit 2 with a hint when there is none."""
    from dagster import DagsterInstance

    home = instance_home(state_dir)
    if not (home / "dagster.yaml").is_file():
        print_error(
            f"no Dagster instance at {home} (no dagster.yaml): start the platform "
            "with `lanehouse up`, or point --state-dir or DAGSTER_HOME at it"
        )
        raise typer.Exit(2)
    return DagsterInstance.from_config(str(home.resolve()))


def collect(
    state_dir: Path | None, specs: Path | None, names: list[str] | None
) -> tuple[list[WorkloadStatus], str | None]:
    """What ``workloads list`` and ``show`` print: each workload's status, and the sensor's."""
    from consumers.scaling.lag import measure_lag
    from orchestration.workloads.status import collect_statuses, sensor_state

    directory = specs if specs is not None else workloads_dir()
    with _instance(state_dir) as instance:
        sensor, cursor = sensor_state(instance)
        measure = functools.partial(measure_lag, timeout=MEASURE_TIMEOUT)
        return collect_statuses(instance, directory, names, cursor=cursor, measure=measure), sensor


def _ago(seconds: float) -> str:
    if seconds < 120:
        return f"{seconds:.0f}s ago"
    if seconds < 7200:
        return f"{seconds / 60:.0f}m ago"
    return f"{seconds / 3600:.1f}h ago"


def _when(moment: datetime | None) -> str:
    return f"{moment:%Y-%m-%d %H:%M:%S}" if moment is not None else "-"


_SENSOR_WORDS = {
    "RUNNING": "running",
    "DECLARED_IN_CODE": "running (its default)",
    "STOPPED": "STOPPED: nothing is started or restarted",
}


def _sensor_text(status: str | None) -> str:
    if status is None:
        return "has never ticked on this instance"
    return _SENSOR_WORDS.get(status, status)


def _console() -> Console:
    """Tables wider than a pipe's default 80 columns: run ids and notes stay readable."""
    console = Console(highlight=False)
    if not console.is_terminal:
        console = Console(highlight=False, width=160)
    return console


def _dump(statuses: list[WorkloadStatus], sensor: str | None) -> None:
    data = {"sensor": sensor, "workloads": [s.model_dump(mode="json") for s in statuses]}
    typer.echo(json.dumps(data, indent=2))


@workloads_app.command("list")
def workloads_list(
    state_dir: StateOption = None, specs: SpecsOption = None, as_json: _JsonOption = False
) -> None:
    """One line per workload: phase, current run, throughput and lag as last reported."""
    statuses, sensor = collect(state_dir, specs, None)
    if as_json:
        _dump(statuses, sensor)
        return
    console = _console()
    table = Table(title=Text(f"workloads (discovery sensor {_sensor_text(sensor)})"))
    for column in ("workload", "source", "phase", "replicas", "run", "status"):
        table.add_column(column, no_wrap=True)
    for column in ("msg/s", "lag", "in flight"):
        table.add_column(column, justify="right", no_wrap=True)
    table.add_column("reported", no_wrap=True)
    table.add_column("note", overflow="fold")
    for status in statuses:
        run = status.run
        progress = status.progress
        lags = [p.lag for p in progress if p.lag is not None]
        rate = sum(p.throughput_per_s or 0.0 for p in progress)
        still = any(p.lag_from == "broker" for p in progress)
        table.add_row(
            Text(status.name),
            Text(status.source_kind or "-"),
            Text(status.phase),
            Text(_replicas(status)),
            Text(run.run_id[:8] if run else "-"),
            Text(run.status if run else "-"),
            Text(f"{rate:.1f}" if progress and not still else "-"),
            Text(str(sum(lags)) if lags else "-"),
            Text(str(sum(p.in_flight or 0 for p in progress)) if progress else "-"),
            Text(_reported(progress)),
            Text(status.note or ""),
        )
    console.print(table)


def _reported(progress: Sequence[TopicProgress]) -> str:
    """How old the figures are; ``broker, now`` when no replica runs (its lag read now)."""
    if not progress:
        return "-"
    if any(p.lag_from == "broker" for p in progress):
        unknown = next((p.lag_unknown for p in progress if p.lag_unknown), None)
        return "broker, now" if unknown is None else "broker: lag unknown"
    return _ago(min(p.age_seconds for p in progress))


def _replicas(status: WorkloadStatus) -> str:
    """``running/wanted``: the runs unfinished against the count the sensor keeps."""
    wanted = status.replicas_wanted
    return f"{status.replicas_running}/{wanted if wanted is not None else '-'}"


@workloads_app.command("status")
def workloads_status(
    name: Annotated[str, typer.Argument(help="Workload name (its spec's `name`).")],
    state_dir: StateOption = None,
    specs: SpecsOption = None,
    as_json: _JsonOption = False,
) -> None:
    """One workload in detail: spec, phase, recent runs, and per-topic progress."""
    statuses, sensor = collect(state_dir, specs, [name])
    if not statuses:
        print_error(f"no workload named {name!r} (spec or runs)")
        raise typer.Exit(2)
    (status,) = statuses
    if as_json:
        _dump(statuses, sensor)
        return
    console = _console()
    beat = status.heartbeat_age
    lines = [
        f"workload   {status.name}",
        f"spec       {status.file or '-'}" + ("" if status.valid else f"  INVALID: {status.error}"),
        f"source     {status.source_kind or '-'}: {', '.join(status.topics) or '-'}",
        f"phase      {status.phase}" + (f" ({status.note})" if status.note else ""),
        f"crashes    {status.crashes} recently"
        + (f"; next start {_when(status.next_start)} UTC" if status.next_start else ""),
        f"replicas   {_replicas(status)} (running/wanted)",
        f"scaling    {status.scaling or '-'}",
        f"heartbeat  {_ago(beat) if beat is not None else '-'}",
        f"sensor     {_sensor_text(sensor)}",
    ]
    for line in lines:
        console.print(Text(line))
    still = [p for p in status.progress if p.lag_from == "broker"]
    if still:
        for p in still:
            lag = p.lag if p.lag is not None else f"unknown ({p.lag_unknown})"
            console.print(Text(f"lag        {lag} on {p.topic} (broker, now: no replica runs)"))
    elif status.progress:
        run_id = status.run.run_id[:8] if status.run else "-"
        topics = Table(title=Text(f"engine progress (last report of run {run_id})"))
        for column in ("topic", "reported", "msg/s", "lag", "in flight", "completed", "failed"):
            topics.add_column(column, overflow="fold")
        topics.add_column("oldest unfinished", overflow="fold")
        for p in status.progress:
            pinned = (
                f"[{p.pinned_partition}]@{p.pinned_offset} for {p.pinned_seconds:.1f}s"
                if p.pinned_offset is not None and p.pinned_seconds is not None
                else "-"
            )
            topics.add_row(
                Text(p.topic),
                Text(_ago(p.age_seconds)),
                Text(f"{p.throughput_per_s or 0.0:.1f}"),
                Text(str(p.lag) if p.lag is not None else "-"),
                Text(str(p.in_flight) if p.in_flight is not None else "-"),
                Text(str(p.records_completed) if p.records_completed is not None else "-"),
                Text(str(p.records_failed) if p.records_failed is not None else "-"),
                Text(pinned),
            )
        console.print(topics)
    else:
        console.print(Text("engine progress: no report from the newest run yet"))
    runs = Table(title=Text("recent runs (newest first)"))
    columns = ("run", "replica", "status", "created (UTC)", "ended (UTC)", "generation", "note")
    for column in columns:
        runs.add_column(column, overflow="fold")
    for run in status.recent_runs:
        notes = []
        if run.stop_reason:
            notes.append(f"stopped: {run.stop_reason}")
        if run.restarts:
            notes.append(f"restart after {run.restarts} crash(es)")
        if run.crash_loop:
            notes.append("crash loop")
        if not run.by_sensor:
            notes.append("launched by a person")
        runs.add_row(
            Text(run.run_id),
            Text(str(run.replica)),
            Text(run.status),
            Text(_when(run.created_at)),
            Text(_when(run.ended_at)),
            Text(run.generation or "-"),
            Text("; ".join(notes)),
        )
    console.print(runs)
