"""``lanehouse permits status [--watch]``: shared permit pools as their database sees them.

Reads the pools and leases straight from the database named by the platform config
(``LANEHOUSE_CONFIG`` or ``./lanehouse.yaml``), so it shows every process of the deployment,
including holders that died and whose leases are running out.
"""

from __future__ import annotations

import json
import time
from dataclasses import asdict
from pathlib import Path
from typing import TYPE_CHECKING, Annotated

import typer
from rich import box
from rich.console import Console, Group
from rich.live import Live
from rich.table import Table
from rich.text import Text

from consumers.config.platform import load_platform_config
from orchestration.console import exits_on, print_error

if TYPE_CHECKING:  # SQLAlchemy takes ~0.3 s to import: only `permits status` pays for it
    from consumers.permits.store import PoolStatus

permits_app = typer.Typer(
    name="permits",
    help="Shared permit pools: sizes, holders, leases, demand and waits.",
    no_args_is_help=True,
)


def pools_table(pools: list[PoolStatus]) -> Group:
    """One table per pool: a row per lease, expired ones dimmed."""
    tables = []
    for pool in pools:
        live = pool.live()
        granted = sum(lease.granted for lease in live)
        in_use = sum(lease.in_use for lease in live)
        demand = sum(lease.demand for lease in live)
        table = Table(
            title=f"pool {pool.pool}: size {pool.size}, granted {granted}, in use {in_use}, "
            f"demand {demand}",
            title_justify="left",
            box=box.SIMPLE_HEAD,
            pad_edge=False,
            caption="use: permits in use, grant: leased, want: demand (up to cap), wait s: "
            "seconds held back by the pool, ttl s: lease left (negative: expired)",
            caption_justify="left",
        )
        # Fits 80 columns: the holder goes under its workload, and only those two may wrap.
        table.add_column("workload / holder", overflow="fold", ratio=1)
        for column in ("weight", "use", "grant", "want", "cap", "wait s", "ttl s"):
            table.add_column(column, justify="right", no_wrap=True)
        for lease in pool.leases:
            expired = lease.expires_in <= 0
            who = Text(lease.workload)
            who.append(f"\n{lease.holder}", style="dim")
            table.add_row(
                who,
                f"{lease.weight:g}",
                str(lease.in_use),
                str(lease.granted),
                str(lease.demand),
                str(lease.cap),
                f"{lease.wait_seconds:.1f}",
                f"-{-lease.expires_in:.0f}" if expired else f"{lease.expires_in:.0f}",
                style="dim" if expired else None,
            )
        tables.append(table)
    return Group(*tables) if tables else Group(Text("no shared permit pools declared yet"))


def _as_json(pools: list[PoolStatus]) -> str:
    return json.dumps(
        [
            {
                "pool": p.pool,
                "size": p.size,
                "leases": [asdict(lease) for lease in p.leases],
            }
            for p in pools
        ],
        indent=2,
    )


@permits_app.command()
def status(
    config: Annotated[
        Path | None,
        typer.Option(
            dir_okay=False,
            show_default=False,
            help="Platform config file (default $LANEHOUSE_CONFIG or ./lanehouse.yaml).",
        ),
    ] = None,
    watch: Annotated[bool, typer.Option(help="Refresh until Ctrl-C.")] = False,
    interval: Annotated[float, typer.Option(min=0.2, help="Seconds between refreshes.")] = 1.0,
    as_json: Annotated[bool, typer.Option("--json", help="Print JSON (not with --watch).")] = False,
) -> None:
    """Pools with their size, and every lease: holder process, workload, weight, permits in
    use, granted, demand, time spent waiting, and time left on the lease."""
    if watch and as_json:
        print_error("--json prints once: drop --watch")
        raise typer.Exit(2)
    try:
        with exits_on():
            platform = load_platform_config(config)
            from consumers.permits.store import PermitStore

            store = PermitStore(platform.permits.database_url())
            pools = store.status()
            if as_json:
                print(_as_json(pools))
                return
            if not watch:
                Console().print(pools_table(pools))
                return
            with Live(pools_table(pools), auto_refresh=False) as live:
                while True:
                    time.sleep(interval)
                    live.update(pools_table(store.status()), refresh=True)
    except KeyboardInterrupt:
        return
