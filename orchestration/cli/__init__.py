"""The ``lanehouse`` command line, one module per command group.

Commands:
    broker    run embedded brokers in the foreground until Ctrl-C or SIGTERM: Tansu (Kafka
              API), pulsar-lite (Pulsar protocol) or both                        (brokers.py)
    produce   write keyed sample records (per-key sequence numbers) to a Kafka or Pulsar topic
    shop      play the demo shop live into Kafka and/or Pulsar topics
    validate  check workload specs (and import their handlers) without running anything
                                                                                 (consume.py)
    consume   run workloads in this process until a signal or idleness; ``--replicas N`` runs a
              local fleet
    demo      embedded brokers, a Kafka and a Pulsar stream, both workloads on one permit pool,
              a verified summary                                                 (platform.py)
    up        the platform: brokers, demo producers, Dagster with the discovery sensor
    backfill  rebuild Spark assets for a day range: a UI backfill if Dagster is up, else here
                                                                                 (backfill.py)
    workloads list|status      workloads with their consumer runs and the engine's progress
                                                                                 (workloads.py)
    workloads rewind           move a workload's group or subscription to a point in time
                                                                                 (rewind.py)
    permits status             shared permit pools: holders, leases, demand and waits
                                                                                 (permits.py)
    dead-letters list|replay   show a (Kafka) workload's dead letters, or republish them
                                                                                 (dead_letters.py)

Shared: ``params.py`` (option values checked at parse time), ``terminal.py`` (progress bar, stop
on a signal) and :mod:`orchestration.console` (the error line and ``exits_on``, the one rule for
how a command fails).

Importing this package must not import Dagster or Spark, so ``lanehouse --help`` and the broker
and consume commands start fast (``tests/unit/test_cli.py`` checks it). The boundary is by room:
at module level the CLI imports only ``consumers``, :mod:`orchestration.console`,
:mod:`orchestration.local`, :mod:`orchestration.demo` ``events``/``producers``/``live_shop`` and
:mod:`orchestration.workloads.names`, none of which imports Dagster. The rooms that do
(:mod:`orchestration.lake`, :mod:`orchestration.demo.runner`, the rest of
:mod:`orchestration.workloads`, ``dagster`` itself) are imported only inside the commands that
need them: ``demo`` (platform.py), ``backfill`` (backfill.py) and ``workloads`` (workloads.py,
rewind.py).
"""

from __future__ import annotations

import typer

from orchestration.cli.backfill import backfill_command
from orchestration.cli.brokers import broker, produce, shop
from orchestration.cli.consume import consume, validate
from orchestration.cli.dead_letters import dead_letters_app
from orchestration.cli.permits import permits_app
from orchestration.cli.platform import demo, up
from orchestration.cli.rewind import workloads_rewind
from orchestration.cli.workloads import workloads_app

app = typer.Typer(
    name="lanehouse",
    help="Run Kafka/Pulsar consuming workloads under Dagster and land data for PySpark.",
    no_args_is_help=True,
    add_completion=False,
)
# In this order in ``lanehouse --help``.
for command in (broker, produce, shop, validate, consume, demo, up):
    app.command()(command)
app.command("backfill")(backfill_command)
app.add_typer(workloads_app)
app.add_typer(permits_app)
app.add_typer(dead_letters_app)

__all__ = ["app", "workloads_rewind"]
