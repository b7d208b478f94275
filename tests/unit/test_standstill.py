"""A still workload's figures: its phase, no rate, nothing in flight and the broker's lag, or
why the broker cannot tell; never a measurement for a workload that runs."""

from __future__ import annotations

from collections.abc import Mapping

import pytest

from consumers import LagUnavailable, WorkloadSpec
from consumers.scaling.lag import Lag, PartitionLag
from orchestration.workloads.standstill import (
    figures_of_all,
    standing_still,
    standstill_figures,
)

pytestmark = pytest.mark.unit


def spec(name: str, source: Mapping[str, object]) -> WorkloadSpec:
    return WorkloadSpec.model_validate(
        {"name": name, "source": source, "handler": "consumers.dev.examples:enrich"}
    )


KAFKA = {"kind": "kafka", "bootstrap_servers": "k:9092", "topics": ["clicks"]}
PULSAR = {"kind": "pulsar", "service_url": "pulsar://p:6650", "topics": ["orders"]}


def test_which_phases_stand_still() -> None:
    assert standing_still("stopped by a person", 0) and standing_still("waiting to restart", 0)
    assert not standing_still("running", 1) and not standing_still("starting", 0)
    assert not standing_still("stopping", 0)
    assert not standing_still("scaled down", 1)  # replica 0 gone, another still reads


def test_figures_from_the_broker_or_why_not() -> None:
    behind = PartitionLag("clicks", 0, committed=70, end=1000, behind=930, oldest_age=45.0)
    figures = standstill_figures(
        spec("c", KAFKA), "stopped", lambda s: Lag(930, 45.0, 1, (behind,))
    )
    assert {k: figures[k] for k in ("status", "throughput_per_s", "in_flight", "lag")} == {
        "status": "stopped",
        "throughput_per_s": 0.0,
        "in_flight": 0,
        "lag": 930,
    }
    [row] = figures["partition_lag"].records
    assert (row.data["committed"], row.data["end"]) == (70, 1000)

    def down(s: WorkloadSpec) -> Lag:
        raise LagUnavailable(s.name, "broker transport failure")

    gone = standstill_figures(spec("c", KAFKA), "waiting to restart", down)
    assert gone["lag"] is None and "broker transport failure" in gone["lag_unknown"]

    pulsar = standstill_figures(spec("o", PULSAR), "stopped")  # the real measure_lag
    assert pulsar["lag"] is None
    assert "a Pulsar subscription's lag needs the broker's admin API" in pulsar["lag_unknown"]


def test_all_still_workloads_are_measured_at_once() -> None:
    measured: list[str] = []

    def measure(s: WorkloadSpec) -> Lag:
        measured.append(s.name)
        return Lag(1, 0.0, 1, ())

    still = [(spec(f"w{i}", KAFKA), "stopped") for i in range(5)]
    read = figures_of_all(still, measure)
    assert sorted(read) == sorted(measured) == [f"w{i}" for i in range(5)]
    assert figures_of_all([], measure) == {}
