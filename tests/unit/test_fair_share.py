"""Weighted max-min division of whole permits: exact totals, demand caps, weights, lending."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from consumers.permits.fair_share import fair_shares

pytestmark = pytest.mark.unit


def test_saturated_claimants_split_by_weight() -> None:
    assert fair_shares(60, {"a": 100, "b": 100, "c": 100}, {"a": 1, "b": 2, "c": 3}) == {
        "a": 10,
        "b": 20,
        "c": 30,
    }


def test_unused_share_is_lent_to_the_busy() -> None:
    # "a" wants 5 of its 30: the other 25 go to "b" (work-conserving).
    assert fair_shares(60, {"a": 5, "b": 100}, {"a": 1, "b": 1}) == {"a": 5, "b": 55}


def test_no_demand_gets_nothing_and_total_never_exceeds_demand() -> None:
    assert fair_shares(10, {"a": 0, "b": 3}, {"a": 1, "b": 1}) == {"a": 0, "b": 3}


def test_remainders_go_by_largest_fraction_then_key() -> None:
    assert fair_shares(10, {"a": 9, "b": 9, "c": 9}, {"a": 1, "b": 1, "c": 1}) == {
        "a": 4,
        "b": 3,
        "c": 3,
    }


@given(
    total=st.integers(0, 500),
    claims=st.dictionaries(
        st.text("abcdef", min_size=1, max_size=3),
        st.tuples(st.integers(0, 300), st.sampled_from([0.5, 1.0, 2.0, 3.0])),
        max_size=6,
    ),
)
def test_parts_are_exact_capped_and_max_min_fair(
    total: int, claims: dict[str, tuple[int, float]]
) -> None:
    demands = {k: d for k, (d, _) in claims.items()}
    weights = {k: w for k, (_, w) in claims.items()}
    parts = fair_shares(total, demands, weights)
    assert set(parts) == set(demands)
    assert sum(parts.values()) == min(total, sum(demands.values()))
    for k, part in parts.items():
        assert 0 <= part <= demands[k]
    # Whoever is short of its demand is behind nobody by more than rounding (a permit each way).
    for k, part in parts.items():
        if part < demands[k]:
            for other, theirs in parts.items():
                assert (part + 1) / weights[k] >= (theirs - 1) / weights[other] - 1e-9
