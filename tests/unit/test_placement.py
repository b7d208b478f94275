"""Host placement: budgets hold, and adding or removing workloads never moves a neighbour."""

from __future__ import annotations

from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from consumers import WorkloadSpec
from consumers.config.names import check_name
from orchestration.workloads.placement import (
    DEFAULT_HOST_BUDGET,
    host_budget_from_env,
    host_name,
    own_run_reason,
    place,
)

pytestmark = pytest.mark.unit


def spec_from(data: dict[str, Any]) -> WorkloadSpec:
    return WorkloadSpec.model_validate(data)


NAMES = st.sets(st.from_regex(r"[a-z]{1,6}", fullmatch=True), max_size=40)


def test_new_workloads_fill_the_fullest_host_with_room_then_open_the_next() -> None:
    assert place(["a", "b", "c"], {}, budget=2) == {"a": "host.0", "b": "host.0", "c": "host.1"}
    placed = place(["a", "b", "c", "d"], {"a": "host.0", "c": "host.1"}, budget=2)
    # host.0 and host.1 hold one each: the lowest number wins the tie, then host.1 has room.
    assert placed == {"a": "host.0", "b": "host.0", "c": "host.1", "d": "host.1"}


def test_a_freed_number_is_reused_and_a_lowered_budget_moves_the_last_names() -> None:
    placed = place(["c", "x"], {"c": "host.1"}, budget=1)
    assert placed == {"c": "host.1", "x": "host.0"}
    lowered = place(["a", "b", "c"], {"a": "host.0", "b": "host.0", "c": "host.0"}, budget=2)
    assert lowered == {"a": "host.0", "b": "host.0", "c": "host.1"}


def test_a_foreign_host_name_is_not_kept() -> None:
    assert place(["a"], {"a": "../etc"}, budget=3) == {"a": "host.0"}
    assert place(["a"], {"a": "host-7"}, budget=3) == {"a": "host.0"}


def test_a_host_is_never_named_like_a_workload() -> None:
    """Heartbeats, run keys and partitions of hosts and workloads share key spaces."""
    with pytest.raises(ValueError, match="not allowed"):
        check_name(host_name(0))


@settings(max_examples=100, deadline=None)
@given(before=NAMES, added=NAMES, removed=NAMES, budget=st.integers(1, 6))
def test_changes_never_move_a_neighbour_and_budgets_hold(
    before: set[str], added: set[str], removed: set[str], budget: int
) -> None:
    first = place(before, {}, budget)
    after = (before | added) - removed
    second = place(after, first, budget)
    assert set(second) == after
    for name in after & before:
        assert second[name] == first[name], name
    for placement in (first, second):
        sizes: dict[str, int] = {}
        for host in placement.values():
            sizes[host] = sizes.get(host, 0) + 1
        assert max(sizes.values(), default=0) <= budget


def test_which_workloads_need_a_run_of_their_own() -> None:
    source = {"kind": "kafka", "bootstrap_servers": "127.0.0.1:9092", "topics": ["t"]}
    base = {"name": "w", "source": source, "handler": "consumers.dev.examples:enrich"}
    assert own_run_reason(spec_from(base)) is None
    assert own_run_reason(spec_from({**base, "run": "own"})) == "run: own"
    assert "replicas" in (own_run_reason(spec_from({**base, "replicas": 2})) or "")
    assert "process" in (own_run_reason(spec_from({**base, "executor": "process"})) or "")


def test_the_budget_comes_from_the_environment_or_says_what_is_wrong() -> None:
    assert host_budget_from_env({}) == DEFAULT_HOST_BUDGET
    assert host_budget_from_env({"LANEHOUSE_HOST_WORKLOADS": " 50 "}) == 50
    with pytest.raises(ValueError, match="LANEHOUSE_HOST_WORKLOADS='many'"):
        host_budget_from_env({"LANEHOUSE_HOST_WORKLOADS": "many"})
    # A digit int() cannot read (superscript two) is the same clear error, not int()'s own.
    with pytest.raises(ValueError, match="expected a whole number"):
        host_budget_from_env({"LANEHOUSE_HOST_WORKLOADS": "\u00b2"})
    with pytest.raises(ValueError, match="at least 1"):
        place(["a"], {}, budget=0)
