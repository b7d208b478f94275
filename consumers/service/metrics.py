"""Metrics: the engine keeps plain integers; this collector turns them into Prometheus families
at scrape time, so the hot path never touches a metrics library.

Served on ``/metrics`` by the consumer's HTTP server (:mod:`consumers.service.http`, ``lanehouse
consume --metrics-port``). The collector reads engine state from the server thread; values are
ints read under the GIL, and a scrape racing a rebalance simply retries once.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass
from typing import TYPE_CHECKING, Literal

from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, Metric
from prometheus_client.registry import Collector

if TYPE_CHECKING:
    from consumers.service.app import ConsumerApp

CounterName = Literal[
    "consumed",
    "completed",
    "failed",
    "timeouts",
    "skipped",
    "dropped_on_revoke",
    "late_completions",
    "retries",
    "dead_lettered",
    "dead_letter_write_failures",
    "parked",
    "forwarded",
    "dropped_by_handler",
    "superseded",
    "redelivered",
    "client_errors",
    "dropped_unassigned",
]
COUNTERS: dict[CounterName, str] = {
    "consumed": "Records received from the broker.",
    "completed": "Records whose outcome is durable (done, outputs or dead letter acknowledged).",
    "failed": "Failed attempts: the handler or an interceptor raised, or the call timed out.",
    "timeouts": "Handler calls cancelled or abandoned after the workload timeout.",
    "skipped": "Records skipped on restart because commit metadata said they were done.",
    "dropped_on_revoke": "Queued records dropped on revoke (the next owner reads them again).",
    "late_completions": "Completions ignored because their partition was already revoked.",
    "retries": "Failed attempts scheduled for another try (the key waits behind them).",
    "dead_lettered": "Records written to the dead-letter topic.",
    "dead_letter_write_failures": "Dead-letter writes that failed and are being retried.",
    "parked": "Records out of attempts with no dead-letter topic: uncommitted, key held.",
    "forwarded": "Output records produced by Forward outcomes.",
    "dropped_by_handler": "Records the handler completed with Drop.",
    "superseded": "Records skipped in unique mode because a later record of the key came.",
    "redelivered": "Records the client delivered a second time (seek or reset), ignored.",
    "client_errors": "Error events the client reported in place of a record.",
    "dropped_unassigned": "Records of partitions no longer assigned, dropped on arrival.",
}

#: Longest key rendered into the ``key`` label of the watermark pin.
KEY_LABEL_MAX = 64


def key_label(key: bytes | None) -> str:
    """Printable, bounded rendering of a record key for a label."""
    if key is None:
        return ""
    text = key.decode("utf-8", "backslashreplace")
    return text if len(text) <= KEY_LABEL_MAX else text[: KEY_LABEL_MAX - 1] + "…"


@dataclass(frozen=True)
class PartitionSnapshot:
    """One assigned partition, as ``/metrics`` and the Dagster consumer job report it."""

    topic: str
    partition: int
    #: The commit position (the group's committed offset until a record is delivered: the
    #: client has no position before) and the log end (client-cached, raised to the position
    #: when the client has read past the cached end, so ``committed <= end``); None until known.
    committed: int | None
    end: int | None
    #: Delivered records not yet below the commit position.
    buffered: int
    #: Log end (client-cached) minus the commit position; None until both are known.
    lag: int | None
    #: The record at the commit position (the pin), if any, and how long it has held it.
    pinned_offset: int | None
    pinned_key: bytes | None
    pinned_seconds: float | None
    #: How long it has had records behind its client position and delivered none (the
    #: liveness watch); None while it moves, is paused by the engine or has nothing behind.
    stalled_seconds: float | None = None
    #: The client was told to pause it (a full buffer, or landing that fails): it fetches none.
    paused: bool = False


@dataclass(frozen=True)
class WorkloadSnapshot:
    """One workload's counters and gauges at one instant (one source of truth for every
    reporter: the Prometheus collector and the consumer job's asset observations)."""

    name: str
    counters: dict[str, int]
    commits: int
    commit_failures: int
    rebalances: int
    in_flight: int
    permits_held: int
    waiting_lanes: int
    abandoned_threads: int
    partitions: tuple[PartitionSnapshot, ...]
    #: Share of the dead-letter safety valve used; None without a dead-letter topic.
    valve_used: float | None = None
    #: Partitions the liveness watch resumed (:mod:`consumers.engine.liveness`).
    stall_recoveries: int = 0


def workload_snapshot(app: ConsumerApp, name: str, now: float) -> WorkloadSnapshot:
    """Read one workload's engine state; ``now`` is a reading of ``app.clock``.

    Safe on the loop thread; from another thread a racing rebalance may raise ``RuntimeError``
    or ``IndexError`` (retry once, as the collector does).
    """
    runner = app.runners[name]
    source = app.sources[name]
    parts = []
    for part in runner.partitions():
        tracker = part.tracker
        position = tracker.position
        if position is None:  # nothing delivered yet, no client position: it reads from here
            position = part.committed
        end, lag = part.high_watermark, None
        if end is not None and position is not None:
            # The cached end is refreshed every few seconds; the client has read up to the
            # position, so the log is at least that long: one moment for both numbers.
            end = max(end, position)
            lag = end - position
        head = tracker.head
        parts.append(
            PartitionSnapshot(
                topic=part.topic,
                partition=part.partition,
                committed=position,
                end=end,
                buffered=len(tracker),
                lag=lag,
                pinned_offset=head.offset if head is not None else None,
                pinned_key=head.key if head is not None else None,
                pinned_seconds=max(now - tracker.pinned_since, 0.0) if head is not None else None,
                stalled_seconds=source.stalls.stalled_for((part.topic, part.partition), now),
                paused=source.paused_at_client((part.topic, part.partition)),
            )
        )
    return WorkloadSnapshot(
        name=name,
        counters=runner.counters.snapshot(),
        commits=source.commits,
        commit_failures=source.commit_failures,
        rebalances=source.rebalances,
        in_flight=runner.in_flight,
        permits_held=runner.permits_held,
        waiting_lanes=runner.waiting_lanes,
        abandoned_threads=runner.abandoned_threads,
        partitions=tuple(parts),
        valve_used=runner.valve_used,
        stall_recoveries=source.stalls.recoveries,
    )


class EngineCollector(Collector):
    """Reads a :class:`ConsumerApp` at scrape time."""

    def __init__(self, app: ConsumerApp) -> None:
        self._app = app

    def collect(self) -> Iterator[Metric]:
        try:
            families = self._families()
        except (RuntimeError, IndexError):  # state changed under us; one retry is enough
            families = self._families()
        yield from families

    def _families(self) -> list[Metric]:
        app = self._app
        now = app.clock.now()
        wl = ["workload"]
        part_labels = ["workload", "topic", "partition"]
        counters = {
            name: CounterMetricFamily(f"lanehouse_records_{name}", doc, labels=wl)
            for name, doc in COUNTERS.items()
        }
        commits = CounterMetricFamily(
            "lanehouse_commits", "Commits the broker confirmed.", labels=wl
        )
        commit_failures = CounterMetricFamily(
            "lanehouse_commit_failures", "Commits that failed (replays later, no loss).", labels=wl
        )
        rebalances = CounterMetricFamily("lanehouse_rebalances", "Assignments received.", labels=wl)
        recoveries = CounterMetricFamily(
            "lanehouse_stall_recoveries",
            "Partitions with records behind them resumed after delivering nothing.",
            labels=wl,
        )
        in_flight = GaugeMetricFamily("lanehouse_in_flight", "Handler calls running.", labels=wl)
        held = GaugeMetricFamily("lanehouse_permits_held", "Permits held.", labels=wl)
        waiting = GaugeMetricFamily(
            "lanehouse_lanes_waiting", "Lanes with work waiting for a permit.", labels=wl
        )
        abandoned = GaugeMetricFamily(
            "lanehouse_abandoned_threads", "Timed-out sync handler calls still running.", labels=wl
        )
        lag = GaugeMetricFamily(
            "lanehouse_partition_lag",
            "Log end (client-cached) minus the commit position.",
            labels=part_labels,
        )
        buffered = GaugeMetricFamily(
            "lanehouse_partition_buffered",
            "Delivered records not yet below the commit position.",
            labels=part_labels,
        )
        pinned = GaugeMetricFamily(
            "lanehouse_watermark_pinned_seconds",
            "How long the record at the commit position has held the watermark.",
            labels=[*part_labels, "offset", "key"],
        )
        paused = GaugeMetricFamily(
            "lanehouse_partition_paused",
            "1 while the client is told to pause the partition (full buffer, landing failing).",
            labels=part_labels,
        )
        stalled = GaugeMetricFamily(
            "lanehouse_partition_stalled_seconds",
            "How long a partition not paused by the engine has had records behind its position "
            "and delivered none.",
            labels=part_labels,
        )
        pool_size = GaugeMetricFamily(
            "lanehouse_pool_size", "Permits in the pool.", labels=["pool"]
        )
        pool_free = GaugeMetricFamily("lanehouse_pool_free", "Free permits.", labels=["pool"])
        for name in list(app.runners):
            snap = workload_snapshot(app, name, now)
            for counter, family in counters.items():
                family.add_metric([name], snap.counters[counter])
            commits.add_metric([name], snap.commits)
            commit_failures.add_metric([name], snap.commit_failures)
            rebalances.add_metric([name], snap.rebalances)
            recoveries.add_metric([name], snap.stall_recoveries)
            in_flight.add_metric([name], snap.in_flight)
            held.add_metric([name], snap.permits_held)
            waiting.add_metric([name], snap.waiting_lanes)
            abandoned.add_metric([name], snap.abandoned_threads)
            for part in snap.partitions:
                labels = [name, part.topic, str(part.partition)]
                buffered.add_metric(labels, part.buffered)
                paused.add_metric(labels, int(part.paused))
                if part.lag is not None:
                    lag.add_metric(labels, part.lag)
                if part.stalled_seconds is not None:
                    stalled.add_metric(labels, part.stalled_seconds)
                if part.pinned_offset is not None and part.pinned_seconds is not None:
                    pin = [*labels, str(part.pinned_offset), key_label(part.pinned_key)]
                    pinned.add_metric(pin, part.pinned_seconds)
        tap = getattr(app, "tap", None)
        tap_dropped: list[Metric] = []
        if tap is not None:
            family = CounterMetricFamily(
                "lanehouse_tap_dropped",
                "Tap events dropped because a subscriber's queue was full.",
                labels=wl,
            )
            for name in list(app.runners):
                family.add_metric([name], tap.dropped_total(name))
            tap_dropped.append(family)
        for pool_name, pool in app.pools.items():
            pool_size.add_metric([pool_name], getattr(pool, "size", 0))
            pool_free.add_metric([pool_name], getattr(pool, "free", 0))
        return [
            *counters.values(),
            commits,
            commit_failures,
            rebalances,
            recoveries,
            in_flight,
            held,
            waiting,
            abandoned,
            lag,
            buffered,
            paused,
            pinned,
            stalled,
            pool_size,
            pool_free,
            *tap_dropped,
        ]
