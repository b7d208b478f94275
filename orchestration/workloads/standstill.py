"""Figures of a workload that is not running: its phase and the broker's lag, never its last
run's rate as if it were current.

A run's last report says "37 msg/s, lag 0" at the moment it stopped; the records that arrive
afterwards are behind a group nobody reads. So when no replica runs (stopped by a person,
waiting to restart, crash-looping, held, disabled, rewinding) the figures come from the broker:
the group's committed offsets against the log end (:func:`consumers.scaling.lag.measure_lag`),
with no rate and nothing in flight. The discovery sensor observes them on the workload's asset
(its page and plots) when the phase changes and every :data:`REFRESH_SECONDS` while it lasts;
``lanehouse workloads list|status`` reads them when it is asked.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping
from concurrent.futures import ThreadPoolExecutor
from typing import Any, Final

from dagster import AssetObservation, MetadataValue, TableRecord

from consumers import LanehouseError, WorkloadSpec
from consumers.scaling.lag import Lag, measure_lag
from orchestration.workloads.assets import workload_key
from orchestration.workloads.names import unit_workload
from orchestration.workloads.registry import Registry
from orchestration.workloads.reporting import PARTITION_TABLE

__all__ = [
    "MOVING_PHASES",
    "REFRESH_SECONDS",
    "StillWatch",
    "figures_of_all",
    "standing_still",
    "standstill_figures",
]

Measure = Callable[[WorkloadSpec], Lag]

#: Phases of replica 0 in which a run reads (or is about to) and reports its own figures.
MOVING_PHASES: Final = frozenset({"running", "starting", "stopping"})
#: How often the sensor observes a still workload's lag again (it grows while nobody reads).
REFRESH_SECONDS: Final = 60.0


def standing_still(phase: str, replicas_running: int) -> bool:
    """No replica reads the workload's topics, and none is about to."""
    return replicas_running == 0 and phase not in MOVING_PHASES


def standstill_figures(
    spec: WorkloadSpec, phase: str, measure: Measure = measure_lag
) -> dict[str, Any]:
    """Observation metadata of a still workload: ``status`` is its phase, no rate, nothing in
    flight, and the lag the broker holds now (``lag`` None and ``lag_unknown`` saying why when
    the broker cannot tell: it is down or slow, or the workload reads Pulsar)."""
    figures: dict[str, Any] = {
        "workload": spec.name,
        "topics": ", ".join(spec.source.topics),
        "status": phase,
        "throughput_per_s": 0.0,
        "in_flight": 0,
        "lag_from": "broker",
    }
    try:
        lag = measure(spec)
    except (LanehouseError, OSError) as exc:
        figures["lag"] = None
        figures["lag_unknown"] = str(exc)
        return figures
    figures["lag"] = lag.records
    figures["oldest_unconsumed_seconds"] = round(lag.oldest_age, 3)
    figures["partition_lag"] = MetadataValue.table(
        records=[
            TableRecord(
                {
                    "lag": p.behind,
                    "partition": p.partition,
                    "committed": p.committed if p.committed is not None else -1,
                    "end": p.end,
                    "topic": p.topic,
                }
            )
            for p in lag.by_partition
        ],
        schema=PARTITION_TABLE,
    )
    return figures


def figures_of_all(
    still: Iterable[tuple[WorkloadSpec, str]], measure: Measure = measure_lag
) -> dict[str, dict[str, Any]]:
    """:func:`standstill_figures` of each (spec, phase), read in parallel: an unreachable broker
    costs one measuring timeout in all, not one per workload."""
    jobs = list(still)
    if not jobs:
        return {}
    with ThreadPoolExecutor(max_workers=min(len(jobs), 16)) as pool:
        figures = pool.map(lambda job: standstill_figures(job[0], job[1], measure), jobs)
        return {spec.name: found for (spec, _), found in zip(jobs, figures, strict=True)}


class StillWatch:
    """The discovery sensor's observations of still workloads: one when a workload becomes
    still or changes phase, then one every :data:`REFRESH_SECONDS` while it stays still, so its
    page shows the lag growing behind it. Kept in the sensor's process (losing it only repeats
    an observation)."""

    def __init__(self) -> None:
        self._seen: dict[str, tuple[str, float]] = {}

    def observations(
        self, phases: Mapping[str, str], registry: Registry, now: float, measure: Measure
    ) -> list[AssetObservation]:
        """``phases``: each replica's phase by unit, as :func:`decide` returns them."""
        moving: set[str] = set()
        first: dict[str, str] = {}
        for unit, phase in phases.items():
            name, replica = unit_workload(unit)
            if phase in MOVING_PHASES:
                moving.add(name)
            if replica == 0:
                first[name] = phase
        due = []
        for name, phase in sorted(first.items()):
            entry = registry.workloads.get(name)
            if entry is None or name in moving or not standing_still(phase, 0):
                self._seen.pop(name, None)
                continue
            seen = self._seen.get(name)
            if seen is not None and seen[0] == phase and now - seen[1] < REFRESH_SECONDS:
                continue
            self._seen[name] = (phase, now)
            due.append((entry.spec, phase))
        return [
            AssetObservation(asset_key=workload_key(name), metadata=figures)
            for name, figures in figures_of_all(due, measure).items()
        ]
