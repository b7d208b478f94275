"""The verifier's own checks, on made-up samples (milliseconds, no broker): a check that
cannot fail proves nothing."""

from __future__ import annotations

import pytest

from tests.reliability.verifier import Positions

pytestmark = pytest.mark.reliability


class Clock:
    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        return self.now


def sampled(clock: Clock, samples: list[tuple[float, dict[int, int]]]) -> Positions:
    positions = Positions(2, clock)
    positions.watch.open()
    for at, found in samples:
        clock.now = at
        positions.add(found)
    return positions


def test_a_partition_behind_its_end_that_does_not_move_is_a_stall() -> None:
    clock = Clock()
    positions = sampled(
        clock, [(0.0, {0: -1001, 1: 0}), (1.0, {0: 10, 1: 5}), (50.0, {0: 10, 1: 20})]
    )
    # Partition 0 sat at 10 (end 20) from 1 s to 50 s; partition 1 moved at 50 s.
    assert positions.longest_stall({0: 20, 1: 20}) == (49.0, 0)
    # At its end, a partition has no lag: no stall.
    assert positions.longest_stall({0: 10, 1: 20}) == (49.0, 1)


def test_a_fault_window_and_the_heal_restart_the_stall_clock() -> None:
    clock = Clock()
    positions = Positions(1, clock)
    positions.watch.open()
    positions.add({0: 5})
    clock.now = 10.0
    with positions.watch.fault():  # closed from 10 s to 40 s
        clock.now = 40.0
    clock.now = 45.0
    positions.add({0: 5})
    assert positions.longest_stall({0: 9}) == (10.0, 0)
    assert positions.longest_stall({0: 9}, since=40.0) == (5.0, 0)


def test_positions_sampled_between_runs_are_not_checked_for_stalls() -> None:
    positions = Positions(1)  # Pulsar's: the watch never opens
    positions.add({0: 3})
    assert positions.longest_stall({0: 9}) is None
