"""Autoscaling in the discovery sensor: each tick, every enabled workload with
``replicas: {min, max}`` gets its lag measured on the broker (not from its runs: a run that is
stuck or gone reports nothing) and :func:`consumers.scaling.policy.next_replicas` chooses its
replica count, which :func:`orchestration.workloads.decisions.decide` then keeps.

Every decision is visible three ways: a line in the tick's log (``clickstream: scaling up
1 -> 3: ...`` or ``... scaling hold 2: ...``; an unreadable broker as a warning), the
``lanehouse/scaling`` tag on the runs a scale-up launches, and an ``AssetObservation`` of the
workload's asset with the figures as numbers (``replicas_wanted``, ``broker_lag_records``,
``oldest_unconsumed_seconds``), which the asset's Plots tab draws over time.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field

from dagster import AssetObservation

from consumers import LanehouseError, WorkloadSpec
from consumers.scaling.lag import Lag, measure_lag
from consumers.scaling.policy import ScaleDecision, ScaleState, next_replicas
from orchestration.workloads.assets import workload_key
from orchestration.workloads.discovery_model import Message
from orchestration.workloads.registry import Registry

__all__ = ["SCALING_TAG", "ScalingTick", "plan_scaling"]

#: On runs launched because autoscaling added replicas: the decision, with its figures.
SCALING_TAG = "lanehouse/scaling"

Measure = Callable[[WorkloadSpec], Lag]


@dataclass
class ScalingTick:
    """What autoscaling decided on one tick."""

    #: Replica counts for :func:`~orchestration.workloads.decisions.decide` (autoscaled only).
    wanted: dict[str, int] = field(default_factory=dict)
    #: The new per-workload state for the cursor.
    states: dict[str, ScaleState] = field(default_factory=dict)
    #: Decisions that changed a count, by workload (their reason tags the runs launched).
    changes: dict[str, ScaleDecision] = field(default_factory=dict)
    messages: list[Message] = field(default_factory=list)
    observations: list[AssetObservation] = field(default_factory=list)


def plan_scaling(
    registry: Registry,
    states: dict[str, ScaleState],
    now: float,
    measure: Measure = measure_lag,
) -> ScalingTick:
    """Measure and decide for every enabled autoscaled workload; others keep no state."""
    tick = ScalingTick()
    for name, entry in sorted(registry.workloads.items()):
        spec = entry.spec
        if not spec.enabled or not spec.replicas.autoscaled:
            continue
        lag: Lag | None
        try:
            lag = measure(spec)
        except (LanehouseError, OSError) as exc:  # the broker is down or slow: hold the count
            lag = None
            tick.messages.append(Message("warning", f"{name}: lag not measured: {exc}"))
        state, decision = next_replicas(spec.replicas, states.get(name), lag, now)
        tick.states[name] = state
        tick.wanted[name] = decision.replicas
        tick.messages.append(Message("info", f"{name}: scaling {decision.reason}"))
        if decision.changed:
            tick.changes[name] = decision
        if lag is not None:
            tick.observations += _observations(spec, decision, lag)
    return tick


def _observations(spec: WorkloadSpec, decision: ScaleDecision, lag: Lag) -> list[AssetObservation]:
    metadata: dict[str, str | int | float] = {
        "workload": spec.name,
        "replicas_wanted": decision.replicas,
        "broker_lag_records": lag.records,
        "oldest_unconsumed_seconds": round(lag.oldest_age, 3),
        "scaling": decision.reason,
    }
    return [AssetObservation(asset_key=workload_key(spec.name), metadata=metadata)]
