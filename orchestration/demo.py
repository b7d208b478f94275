"""``make demo``: the platform's main job on embedded defaults, verified end to end.

Starts Tansu, writes a keyed sample stream, runs the example workload
(``workloads/clickstream.yaml``) until the stream is drained, then checks what matters:
every record handled, per-key order never violated, committed offsets equal to the log end.
"""

from __future__ import annotations

import os
import time
from pathlib import Path

from rich.console import Console
from rich.table import Table

from consumers.backends.kafka import committed_offsets, log_end_offsets
from consumers.embedded.tansu import start_tansu
from consumers.examples import ORDER
from consumers.run import run_specs
from consumers.sample import produce_sample
from consumers.spec import load_spec

SPEC = Path(__file__).resolve().parent.parent / "workloads" / "clickstream.yaml"


def run_demo(records: int, keys: int, partitions: int, console: Console) -> bool:
    """Run the demo; print a summary table; True when every check passed."""
    with start_tansu() as broker:
        console.print(f"Embedded Kafka (Tansu) at {broker.bootstrap}")
        spec = load_spec(SPEC, env={**os.environ, "KAFKA_BOOTSTRAP": broker.bootstrap})
        topic = spec.source.topics[0]
        produced = produce_sample(broker.bootstrap, topic, records, keys, partitions=partitions)
        console.print(f"Produced {produced.records:,} records over {keys:,} keys to {topic}")
        ORDER.reset()
        started = time.monotonic()
        [summary] = run_specs([spec], until_idle=1.0, install_signal_handlers=True)
        seconds = time.monotonic() - started
        committed = committed_offsets(broker.bootstrap, spec.source.group, topic, partitions)
        ends = log_end_offsets(broker.bootstrap, topic, partitions)

    handled = summary.counters["completed"]
    checks = {
        "every record handled": handled == records and ORDER.handled == records,
        "per-key order kept": not ORDER.violations,
        "committed offsets == log end": committed == ends,
    }
    table = Table(title="Lanehouse demo")
    table.add_column("measure")
    table.add_column("value", justify="right")
    table.add_row("records handled", f"{handled:,}")
    table.add_row("keys", f"{len(ORDER.last):,}")
    table.add_row("throughput (first to last record)", f"{ORDER.per_second:,.0f} msg/s")
    table.add_row("wall time incl. group join and 1 s idle check", f"{seconds:.1f} s")
    table.add_row("order violations", str(len(ORDER.violations)))
    table.add_row("committed / log end", f"{sum(committed.values()):,} / {sum(ends.values()):,}")
    for name, ok in checks.items():
        table.add_row(name, "[green]yes[/green]" if ok else "[red]NO[/red]")
    console.print(table)
    return all(checks.values())
