"""``lanehouse backfill ASSET... --from DAY --to DAY``: rebuild Spark assets for a day range, as
a UI backfill when a Dagster webserver answers, else in this process with a progress display
(:mod:`orchestration.shop.backfill` does both).

The lake is Dagster and Spark: the command imports it when it runs, so ``lanehouse --help``
stays fast.
"""

from __future__ import annotations

import os
from datetime import date
from pathlib import Path
from typing import Annotated, Final

import typer
from rich.markup import escape
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

from consumers import LanehouseError
from consumers.config.loading import state_dir as default_state_dir
from orchestration.console import err_console, exits_on, print_error
from orchestration.local.instance import lake_dir, prepare_dagster_home

DEFAULT_URL: Final = "http://127.0.0.1:3000"


def backfill_command(
    assets: Annotated[
        list[str],
        typer.Argument(
            metavar="ASSET",
            help="Spark assets to rebuild (e.g. clean_clicks sessions).",
            show_default=False,
        ),
    ],
    from_: Annotated[str, typer.Option("--from", help="First day, YYYY-MM-DD (UTC).")],
    to: Annotated[str, typer.Option("--to", help="Last day, YYYY-MM-DD (UTC), included.")],
    state_dir: Annotated[
        Path | None,
        typer.Option(
            file_okay=False,
            show_default=False,
            help="State dir of the local instance for --in-process (default $LANEHOUSE_HOME "
            "or .lanehouse); its lake/ holds the tables unless LANEHOUSE_LAKE is set.",
        ),
    ] = None,
    in_process: Annotated[
        bool, typer.Option("--in-process", help="Run here even if a webserver answers.")
    ] = False,
    url: Annotated[str, typer.Option(help="Dagster webserver to launch the backfill on.")] = (
        DEFAULT_URL
    ),
) -> None:
    """Rebuild Spark assets for a range of days as one run (a UI backfill if Dagster is up)."""
    from orchestration.shop.backfill import day_range, selected_assets, webserver_answers

    with exits_on(ValueError, code=2):
        names = selected_assets(assets)
    with exits_on(ValueError, code=2):
        days = day_range(from_, to)
    if not in_process and webserver_answers(url):
        _launch_on_webserver(url, names, days)
    else:
        if not in_process:
            err_console.print(escape(f"no Dagster webserver at {url}: running in this process"))
        _run_here(state_dir, names, days)


def _launch_on_webserver(url: str, names: list[str], days: list[date]) -> None:
    from orchestration.shop.backfill import launch_backfill

    with exits_on(LanehouseError, OSError):
        backfill_id = launch_backfill(url, names, days)
    print(f"backfill {backfill_id}: {', '.join(names)} for {days[0]}..{days[-1]}")
    print(f"{url.rstrip('/')}/runs/b/{backfill_id}?tab=partitions")


def _run_here(state_dir: Path | None, names: list[str], days: list[date]) -> None:
    from dagster import DagsterInstance

    from orchestration.shop.backfill import materialize_days

    state = default_state_dir(state_dir)
    os.environ["LANEHOUSE_LAKE"] = str(lake_dir(state))  # the assets read it at run time
    instance = DagsterInstance.from_config(str(prepare_dagster_home(state)))
    progress = Progress(
        TextColumn("[bold]{task.description}"),
        BarColumn(),
        MofNCompleteColumn(),
        TextColumn("assets"),
        TimeElapsedColumn(),
        console=err_console,
    )
    with progress:
        task = progress.add_task(escape(f"backfill {days[0]}..{days[-1]}"), total=len(names))

        def report(done: int, total: int) -> None:
            progress.update(task, completed=done, total=total)

        run = materialize_days(
            days[0], days[-1], instance=instance, assets=names, on_progress=report
        )
    for dataset, per_day in sorted(run.reconciliation.items()):
        for day, c in sorted(per_day.items()):
            print(
                f"{dataset} {day}: landed {c.landed} = clean {c.clean} + quarantined "
                f"{c.quarantined} + duplicates {c.duplicates} (unaccounted {c.unaccounted})"
            )
    print(f"run {run.run_id}: {'success' if run.success else 'FAILED'}, lake {lake_dir(state)}")
    if not run.success or not run.checks_passed:
        print_error("the run failed or a check did not pass: see the run's events in Dagster")
        raise typer.Exit(1)
