"""The autoscaling policy, tick by tick (10 s apart, as the discovery sensor runs it)."""

from __future__ import annotations

import itertools
import random

import pytest

from consumers import Replicas
from consumers.scaling import UP_WAIT, Lag, ScaleDecision, ScaleState, next_replicas

pytestmark = pytest.mark.unit

TICK = 10.0
TARGET = 30.0
SPEC = Replicas(min=1, max=6, target_lag=TARGET, cooldown=300)


def lag(age: float, partitions: int = 12) -> Lag:
    return Lag(records=int(age * 100), oldest_age=age, partitions=partitions, by_partition=())


class Ticks:
    """The sensor's loop: state carried from tick to tick, every decision kept."""

    def __init__(self, spec: Replicas = SPEC, state: ScaleState | None = None) -> None:
        self.spec = spec
        self.state = state
        self.now = 0.0
        self.decisions: list[ScaleDecision] = []

    def tick(self, measured: Lag | None) -> ScaleDecision:
        self.now += TICK
        self.state, decision = next_replicas(self.spec, self.state, measured, self.now)
        # The cursor holds the state as JSON: what comes back must decide the same.
        self.state = ScaleState.model_validate_json(self.state.model_dump_json())
        self.decisions.append(decision)
        return decision

    @property
    def replicas(self) -> int:
        return self.spec.min if self.state is None else self.state.replicas

    def changes(self) -> list[ScaleDecision]:
        return [d for d in self.decisions if d.changed]


def test_first_look_starts_at_min_and_a_calm_group_stays_there() -> None:
    ticks = Ticks()
    assert ticks.tick(lag(0)).replicas == 1
    assert ticks.changes() == []


def test_a_backlog_scales_to_max_within_a_few_ticks() -> None:
    ticks = Ticks()
    while ticks.replicas < SPEC.max:
        ticks.tick(lag(2 * TARGET))  # twice the target: the group doubles each time it may
        assert len(ticks.decisions) <= 10, [d.reason for d in ticks.decisions]
    ups = ticks.changes()
    assert [(d.previous, d.replicas) for d in ups] == [(1, 2), (2, 4), (4, 6)]
    assert ups[0].reason == "up 1 -> 2: oldest unconsumed record 60 s old, target 30 s"
    assert len(ticks.decisions) == 1 + 2 * int(UP_WAIT / TICK)  # one change per UP_WAIT
    held = ticks.tick(lag(3 * TARGET))
    assert not held.changed and "at the ceiling, max 6" in held.reason


def test_a_deep_backlog_jumps_in_one_step() -> None:
    decision = Ticks().tick(lag(95, partitions=12))
    assert (decision.previous, decision.replicas) == (1, 4)
    assert decision.reason == "up 1 -> 4: oldest unconsumed record 95 s old, target 30 s"


def test_drained_returns_to_min_after_the_cooldown_not_before() -> None:
    ticks = Ticks(state=ScaleState(replicas=6, changed_at=-1000.0))
    calm_from = ticks.now + TICK
    while ticks.now + TICK < calm_from + SPEC.cooldown:
        decision = ticks.tick(lag(0))
        assert not decision.changed, decision.reason
    assert "below half the target for 290 s" in ticks.decisions[-1].reason
    decision = ticks.tick(lag(0))  # 300 s of calm
    assert (decision.previous, decision.replicas) == (6, 1), decision.reason
    assert decision.reason == "down 6 -> 1: oldest unconsumed record 0 s old, target 30 s"


def test_a_lag_below_half_the_target_scales_down_in_proportion() -> None:
    ticks = Ticks(state=ScaleState(replicas=6, changed_at=-1000.0))
    for _ in range(int(SPEC.cooldown / TICK) + 1):
        ticks.tick(lag(TARGET / 3))
    assert [(d.previous, d.replicas) for d in ticks.changes()] == [(6, 2)]


def test_a_burst_restarts_the_cooldown() -> None:
    ticks = Ticks(state=ScaleState(replicas=4, changed_at=-1000.0))
    for _ in range(20):
        ticks.tick(lag(0))
    ticks.tick(lag(0.8 * TARGET))  # back in the band: calm starts over at the next tick
    for _ in range(int(SPEC.cooldown / TICK)):
        assert not ticks.tick(lag(0)).changed
    assert ticks.tick(lag(0)).changed


def test_no_flapping_under_a_steady_lag_near_the_target() -> None:
    rng = random.Random(7)
    ticks = Ticks(state=ScaleState(replicas=3, changed_at=-1000.0))
    for _ in range(200):
        ticks.tick(lag(rng.uniform(0.6, 0.95) * TARGET))
    assert ticks.changes() == []
    assert ticks.replicas == 3


def test_never_above_the_partition_count() -> None:
    spec = Replicas(min=1, max=10, target_lag=TARGET, cooldown=0)
    ticks = Ticks(spec)
    for _ in range(30):
        ticks.tick(lag(20 * TARGET, partitions=3))
        assert ticks.replicas <= 3
    assert ticks.replicas == 3
    assert "the source has 3 partitions" in ticks.decisions[-1].reason
    # More replicas than partitions (the topics changed under them): down at once.
    over = next_replicas(spec, ScaleState(replicas=8, changed_at=0.0), lag(0, partitions=3), 5.0)
    assert over[1].replicas == 3 and over[1].reason.startswith("down 8 -> 3")


def test_min_wins_over_the_partition_count() -> None:
    spec = Replicas(min=4, max=8, target_lag=TARGET)
    state, decision = next_replicas(spec, None, lag(10 * TARGET, partitions=2), 0.0)
    assert decision.replicas == 4 and not decision.changed
    assert state.replicas == 4


def test_a_bounds_edit_clamps_at_once() -> None:
    state = ScaleState(replicas=6, changed_at=0.0)
    narrowed = Replicas(min=1, max=4, target_lag=TARGET)
    after, decision = next_replicas(narrowed, state, lag(10 * TARGET), 1.0)
    assert (decision.previous, decision.replicas) == (6, 4)
    assert decision.reason == "bounds now 1..4: 6 -> 4"
    raised = Replicas(min=5, max=8, target_lag=TARGET)
    _, decision = next_replicas(raised, after, None, 2.0)  # even when the lag is unreadable
    assert (decision.previous, decision.replicas) == (4, 5)


def test_an_unreadable_lag_holds_and_does_not_count_as_calm() -> None:
    ticks = Ticks(state=ScaleState(replicas=3, changed_at=-1000.0))
    for age in itertools.chain([0.0] * 10, [None] * 50, [0.0] * 10):
        decision = ticks.tick(None if age is None else lag(age))
        assert not decision.changed
    assert ticks.decisions[20].reason == "hold 3: lag unreadable"
    assert ticks.state is not None and ticks.state.reason == ticks.decisions[-1].reason
    assert "below half the target for 90 s" in ticks.decisions[-1].reason
