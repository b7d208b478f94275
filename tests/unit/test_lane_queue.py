"""A Lane queues as the deque it replaces, for every sequence of the operations it offers."""

from __future__ import annotations

from collections import deque
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from consumers.engine.partition import Lane, PartitionState

operations = st.lists(
    st.one_of(
        st.tuples(st.just("append"), st.integers()),
        st.tuples(st.just("appendleft"), st.integers()),
        st.tuples(st.just("extendleft"), st.lists(st.integers(), max_size=4)),
        st.tuples(st.just("popleft"), st.none()),
    ),
    max_size=60,
)


@given(operations)
def test_lane_queue_matches_a_deque(ops: list[tuple[str, Any]]) -> None:
    model: deque[Any] = deque()
    lane = Lane("k", PartitionState("t", 0), ordered=True)
    for op, arg in ops:
        if op == "popleft":
            if not model:
                with pytest.raises(IndexError):
                    lane.popleft()
                continue
            assert lane.popleft() == model.popleft()
        else:
            getattr(model, op)(arg)
            getattr(lane, op)(arg)  # records are opaque to the queue; ints stand in for them
        assert len(lane) == len(model)
        assert (lane.head is not None) == bool(model)
    assert [lane.popleft() for _ in range(len(lane))] == list(model)
