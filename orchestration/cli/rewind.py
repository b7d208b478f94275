"""``lanehouse workloads rewind NAME --to ...``: reprocess a workload from a point in time.

With a Dagster instance (``lanehouse up``'s, or ``DAGSTER_HOME``) the rewind runs as the
``rewind_workload`` job in this process, a run the UI shows: it stops the workload's consumer
runs, rewinds, and the discovery sensor starts them again. Without one it rewinds directly and
refuses while the group has live members. ``--dry-run`` only prints what would change.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import TYPE_CHECKING, Annotated

import typer

from consumers.rewind.target import RewindTarget, parse_target
from orchestration.cli.workloads import SpecsOption, StateOption, instance_home, workloads_app
from orchestration.console import exits_on, print_error
from orchestration.local.instance import lake_dir
from orchestration.workloads.names import PARTITION_TAG, workloads_dir

if TYPE_CHECKING:
    from consumers.rewind.plan import RewindPlan


def _target(value: str) -> RewindTarget:
    try:
        return parse_target(value)
    except ValueError as exc:
        raise typer.BadParameter(str(exc)) from exc


def _partitions(value: str | None) -> list[int] | None:
    if value is None:
        return None
    try:
        parts = [int(p) for p in value.split(",") if p.strip()]
    except ValueError:
        raise typer.BadParameter(f"{value!r}: give partition numbers, e.g. 0,2,5") from None
    if not parts or min(parts) < 0:
        raise typer.BadParameter(f"{value!r}: give partition numbers, e.g. 0,2,5")
    return parts


@workloads_app.command("rewind")
def workloads_rewind(
    name: Annotated[str, typer.Argument(help="Workload name (its spec's `name`).")],
    to: Annotated[
        str,
        typer.Option(
            "--to",
            help="earliest | latest | ISO datetime (UTC when no zone) | a span back, e.g. -2h.",
        ),
    ],
    partitions: Annotated[
        str | None,
        typer.Option(help="Kafka partitions to rewind, e.g. 0,2 (every topic); default all."),
    ] = None,
    dry_run: Annotated[
        bool, typer.Option("--dry-run", help="Print what would change; change nothing.")
    ] = False,
    timeout: Annotated[
        float, typer.Option(min=1, help="Seconds to wait for consumer runs to drain.")
    ] = 180.0,
    state_dir: StateOption = None,
    specs: SpecsOption = None,
) -> None:
    """Move a workload's group (Kafka) or subscription (Pulsar) to a point in time."""
    target = _target(to)
    wanted = _partitions(partitions)
    directory = specs if specs is not None else workloads_dir()
    from dagster import Failure

    from orchestration.workloads.finding import find_workload

    try:
        _, spec = find_workload(directory, name, disabled_too=True)
    except Failure as exc:
        print_error(exc.description or str(exc))
        raise typer.Exit(2) from exc
    home = instance_home(state_dir)
    if dry_run or not (home / "dagster.yaml").is_file():
        from consumers.rewind.apply import rewind_workload

        with exits_on():
            plan = rewind_workload(spec, target, wanted, dry_run=dry_run, lake=lake_dir(state_dir))
    else:
        plan = _under_dagster(home, directory, state_dir, name, to, wanted, timeout)
    for line in plan.lines():
        typer.echo(line)


def _under_dagster(
    home: Path,
    directory: Path,
    state_dir: Path | None,
    name: str,
    to: str,
    partitions: list[int] | None,
    timeout: float,
) -> RewindPlan:
    """Run the ``rewind_workload`` job here, on the platform's instance."""
    from dagster import DagsterInstance, execute_job, reconstructable

    from orchestration.workloads.rewind_job import rewind_job

    # The op finds the spec and the lake the way a run launched by the platform does.
    os.environ["LANEHOUSE_WORKLOADS"] = str(directory.resolve())
    if state_dir is not None:
        os.environ["LANEHOUSE_HOME"] = str(state_dir.resolve())
    config = {"to": to, "partitions": partitions, "stop_timeout": timeout}
    run_config = {
        "ops": {"rewind": {"config": config}},
        # The plan is printed below; the run's own log stays in the UI.
        "loggers": {"console": {"config": {"log_level": "WARNING"}}},
    }
    with (
        DagsterInstance.from_config(str(home.resolve())) as instance,
        execute_job(
            reconstructable(rewind_job),
            instance=instance,
            run_config=run_config,
            tags={PARTITION_TAG: name},
            raise_on_error=False,
        ) as result,
    ):
        if not result.success:
            failures = [e.step_failure_data.error for e in result.get_step_failure_events()]
            reason = failures[0].message.strip() if failures and failures[0] else "see the run"
            print_error(f"{reason} (run {result.run_id})")
            raise typer.Exit(1)
        plan: RewindPlan = result.output_for_node("rewind")
        typer.echo(f"run {result.run_id} (job rewind_workload)")
        return plan
