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

from collections.abc import Callable
from typing import Any, Final

from dagster import MetadataValue, TableRecord

from consumers.config.spec import WorkloadSpec
from consumers.errors import LanehouseError
from consumers.scaling.lag import Lag, measure_lag
from orchestration.workloads.reporting import PARTITION_TABLE

__all__ = ["MOVING_PHASES", "REFRESH_SECONDS", "standing_still", "standstill_figures"]

#: Phases of replica 0 in which a run reads (or is about to) and reports its own figures.
MOVING_PHASES: Final = frozenset({"running", "starting", "stopping"})
#: How often the sensor observes a still workload's lag again (it grows while nobody reads).
REFRESH_SECONDS: Final = 60.0


def standing_still(phase: str, replicas_running: int) -> bool:
    """No replica reads the workload's topics, and none is about to."""
    return replicas_running == 0 and phase not in MOVING_PHASES


def standstill_figures(
    spec: WorkloadSpec, phase: str, measure: Callable[[WorkloadSpec], Lag] = measure_lag
) -> dict[str, Any]:
    """Observation metadata of a still workload: ``status`` is its phase, no rate, nothing in
    flight, and the lag the broker holds now (``lag`` None and ``lag_unknown`` saying why when
    the broker cannot tell: it is down, or a Pulsar workload, see ``measure_lag``)."""
    figures: dict[str, Any] = {
        "workload": spec.name,
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
