"""How many replicas an autoscaled workload should run, from its lag: pure, no I/O, no clock.

The discovery sensor calls :func:`next_replicas` every tick (~10 s) with the lag it measured
(:func:`consumers.scaling.lag.measure_lag`) and the :class:`ScaleState` it kept in its cursor.

The policy targets the age of the oldest unconsumed record (``target_lag``):

- **Up** when that age is above the target: ``ceil(current * age / target)``, at least one
  more. The replicas needed grow with how far behind the group is, and a group twice as old as
  its target needs about twice the consumers to catch up in the same time. At most once per
  :data:`UP_WAIT` seconds, so new members join and the group rebalances before the next look.
- **Down** only after the age stayed below half the target (the band between half and the
  whole target holds the count, so a lag hovering near the target never flaps) for the whole
  ``cooldown``, and not within ``cooldown`` of the last change; then to
  ``max(min, ceil(current * age / target))``: a drained group (age 0) goes straight to ``min``.
- **Hold** in the band, and when the lag could not be read (the sensor passes None; the calm
  seen so far is forgotten, as nobody saw the time in between).
- **First look** (no state): ``min``, then the rules above, so a backlog already there at the
  first look scales up at once.
- **Bounds**: never below ``min``, never above ``max`` nor the source's partition count (an
  extra member of a Kafka group gets no partition). ``min`` wins over the partition count: it is
  a promise of the spec (e.g. standbys ready for a rebalance), kept even when idle. A spec edit
  that moves the bounds clamps the count into them at once.

Compared with KEDA's Kafka scaler: KEDA feeds ``lagThreshold`` records per replica to the HPA,
so desired = ``ceil(total lag / lagThreshold)``, capped at the partition count unless
``allowIdleConsumers``, and the HPA scales down after a 300 s stabilization window. A record
count means a different delay at every record rate (and a threshold must be retuned when the
rate or the handler's cost changes); the age of the oldest record is the delay itself, which is
what a target is written in. The partition cap here always applies: idle members only slow
rebalances. ``cooldown`` plays the stabilization window's part; ``UP_WAIT`` spaces scale-ups
as the HPA's scale-up policies do.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Final

from consumers.config.loading import FrozenModel
from consumers.config.replicas import Replicas
from consumers.scaling.lag import Lag

__all__ = ["UP_WAIT", "ScaleDecision", "ScaleState", "next_replicas"]

#: Seconds between two scale-ups: a new member's join and the rebalance take a few seconds.
UP_WAIT: Final = 30.0


class ScaleState(FrozenModel):
    """What the policy remembers between ticks (JSON in the sensor's cursor)."""

    replicas: int
    #: When the count last changed (seconds, the caller's clock).
    changed_at: float | None = None
    #: Since when the lag stayed below half the target; None while it is not.
    calm_since: float | None = None
    #: The last decision's reason, for ``lanehouse workloads status``.
    reason: str | None = None


@dataclass(frozen=True)
class ScaleDecision:
    """The count to run and why, in one line with the figures."""

    replicas: int
    previous: int
    reason: str

    @property
    def changed(self) -> bool:
        return self.replicas != self.previous


def next_replicas(
    spec: Replicas, state: ScaleState | None, lag: Lag | None, now: float
) -> tuple[ScaleState, ScaleDecision]:
    """The next state and decision, from the last state (None: first look, start at ``min``),
    the lag just measured (None: it could not be read) and ``now`` (seconds on any clock the
    caller keeps using)."""
    after, decision = _decide(spec, state, lag, now)
    return after.model_copy(update={"reason": decision.reason}), decision


def _decide(
    spec: Replicas, state: ScaleState | None, lag: Lag | None, now: float
) -> tuple[ScaleState, ScaleDecision]:
    state = state if state is not None else ScaleState(replicas=spec.min)
    current = state.replicas
    if not spec.min <= current <= spec.max:
        clamped = min(max(current, spec.min), spec.max)
        return _change(
            state, clamped, now, f"bounds now {spec.min}..{spec.max}: {current} -> {clamped}"
        )
    if lag is None:
        # Calm that was not seen is not counted: the cooldown starts over once lag is read.
        return _hold(state.model_copy(update={"calm_since": None}), "lag unreadable")
    target, age = spec.target_lag, lag.oldest_age
    figures = f"oldest unconsumed record {age:.0f} s old, target {target:.0f} s"
    ceiling = max(spec.min, min(spec.max, lag.partitions))
    if current > ceiling:
        return _change(state, ceiling, now, f"down {current} -> {ceiling}: {_ceiling(spec, lag)}")
    since = None if state.changed_at is None else now - state.changed_at
    if age > target:
        busy = state.model_copy(update={"calm_since": None})
        wanted = min(ceiling, max(current + 1, math.ceil(current * age / target)))
        if wanted == current:
            return _hold(busy, f"{figures}; at the ceiling, {_ceiling(spec, lag)}")
        if since is not None and since < UP_WAIT:
            return _hold(
                busy, f"{figures}; last change {since:.0f} s ago, up after {UP_WAIT:.0f} s"
            )
        return _change(busy, wanted, now, f"up {current} -> {wanted}: {figures}")
    if age >= target / 2:
        return _hold(state.model_copy(update={"calm_since": None}), f"{figures}; in the band")
    calm_since = state.calm_since if state.calm_since is not None else now
    calm = state.model_copy(update={"calm_since": calm_since})
    wanted = max(spec.min, math.ceil(current * age / target))
    if wanted >= current:
        return _hold(calm, figures)
    calm_for = now - calm_since
    if calm_for < spec.cooldown or (since is not None and since < spec.cooldown):
        return _hold(
            calm,
            f"{figures}; below half the target for {calm_for:.0f} s, down to {wanted} after "
            f"the {spec.cooldown:.0f} s cooldown",
        )
    return _change(calm, wanted, now, f"down {current} -> {wanted}: {figures}")


def _change(
    state: ScaleState, replicas: int, now: float, reason: str
) -> tuple[ScaleState, ScaleDecision]:
    """A new count: the calm period starts over with it."""
    after = ScaleState(replicas=replicas, changed_at=now, calm_since=None)
    return after, ScaleDecision(replicas, state.replicas, reason)


def _hold(state: ScaleState, why: str) -> tuple[ScaleState, ScaleDecision]:
    return state, ScaleDecision(state.replicas, state.replicas, f"hold {state.replicas}: {why}")


def _ceiling(spec: Replicas, lag: Lag) -> str:
    if lag.partitions < spec.max:
        return f"the source has {lag.partitions} partitions"
    return f"max {spec.max}"
