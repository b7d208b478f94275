"""When a plain def runs inline on the loop: proven fast on threads, demoted when slow."""

from __future__ import annotations

import pytest

from consumers.clock import ManualClock
from consumers.execution.inline import (
    FAST,
    LIMIT,
    MAX_PROBATION,
    PROBATION,
    PROVE_CALLS,
    InlineGate,
)

pytestmark = pytest.mark.unit

QUICK = FAST / 10


def proven(clock: ManualClock) -> InlineGate:
    gate = InlineGate(clock)
    for _ in range(PROVE_CALLS):
        gate.threaded(QUICK)
    assert gate.inline
    return gate


def test_a_handler_runs_inline_after_exactly_the_proof_of_fast_calls() -> None:
    gate = InlineGate(ManualClock())
    for _ in range(PROVE_CALLS - 1):
        gate.threaded(QUICK)
    assert not gate.inline
    gate.threaded(QUICK)
    assert gate.inline


def test_one_slow_threaded_call_restarts_the_proof() -> None:
    gate = InlineGate(ManualClock())
    for _ in range(PROVE_CALLS - 1):
        gate.threaded(QUICK)
    gate.threaded(FAST)  # waits on I/O, say
    for _ in range(PROVE_CALLS - 1):
        gate.threaded(QUICK)
    assert not gate.inline
    gate.threaded(QUICK)
    assert gate.inline


def test_one_inline_call_over_the_limit_goes_back_to_threads() -> None:
    gate = proven(ManualClock())
    gate.ran_inline(LIMIT * 0.9)  # a GIL switch interval or a collection: tolerated
    assert gate.inline
    gate.ran_inline(LIMIT)
    assert (gate.inline, gate.demotions) == (False, 1)


def test_a_handler_that_becomes_slow_on_average_goes_back_to_threads() -> None:
    gate = proven(ManualClock())
    calls = 0
    while gate.inline:
        gate.ran_inline(FAST * 2)  # each under LIMIT, together too slow for the loop
        calls += 1
        assert calls < 100, "never demoted"
    assert calls > 1 and gate.demotions == 1


def test_probation_blocks_a_new_proof_and_doubles_up_to_its_cap() -> None:
    clock = ManualClock()
    gate = proven(clock)
    expected = PROBATION
    for _ in range(12):
        gate.ran_inline(LIMIT)
        for _ in range(PROVE_CALLS):
            gate.threaded(QUICK)
        assert not gate.inline, "promoted during probation"
        clock.advance(expected)
        gate.threaded(QUICK)
        promoted: bool = gate.inline  # read anew: mypy keeps the narrowing of the assert above
        assert promoted
        expected = min(expected * 2, MAX_PROBATION)
    assert expected == MAX_PROBATION
