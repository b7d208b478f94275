"""Properties of the per-partition commit watermark and of the done-offsets commit metadata."""

from __future__ import annotations

import base64
import random
import zlib

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from consumers.backends.metadata import (
    METADATA_MAX_BYTES,
    METADATA_PREFIX,
    decode_done,
    encode_done,
)
from consumers.engine.partition import PartitionState
from consumers.engine.tracked import TrackedRecord
from consumers.engine.tracker import OffsetTracker

pytestmark = pytest.mark.unit


PART = PartitionState("t", 0)


def _record(offset: int) -> TrackedRecord:
    return TrackedRecord("t", 0, offset, None, b"", None, 0, PART)


@st.composite
def delivery_plan(draw: st.DrawFn) -> tuple[list[int], list[int], int]:
    """Increasing offsets with random gaps, a completion order, and how much of it happens."""
    start = draw(st.integers(min_value=0, max_value=1_000))
    gaps = draw(st.lists(st.integers(min_value=1, max_value=5), min_size=1, max_size=40))
    offsets = []
    offset = start
    for gap in gaps:
        offsets.append(offset)
        offset += gap
    order = draw(st.permutations(range(len(offsets))))
    completed = draw(st.integers(min_value=0, max_value=len(offsets)))
    return offsets, list(order), completed


def _expected_position(offsets: list[int], done: set[int]) -> int:
    """Independent model: first delivered offset not done, else one past the last."""
    for offset in offsets:
        if offset not in done:
            return offset
    return offsets[-1] + 1


@given(delivery_plan())
def test_position_is_the_first_incomplete_delivered_record(
    plan: tuple[list[int], list[int], int],
) -> None:
    offsets, order, completed = plan
    tracker = OffsetTracker()
    empty = tracker.position  # a local: mypy would keep an assert's narrowing of the attribute
    assert empty is None
    records = []
    for offset in offsets:
        rec = _record(offset)
        tracker.deliver([rec], now=0.0)
        records.append(rec)
    assert tracker.position == offsets[0]

    done: set[int] = set()
    for step, index in enumerate(order[:completed], start=1):
        rec = records[index]
        before = tracker.position
        advanced = tracker.complete(rec, now=float(step))
        done.add(rec.offset)
        position = tracker.position
        assert position == _expected_position(offsets, done)
        # Never beyond an incomplete record; the watermark never moves back.
        assert all(o in done for o in offsets if o < position)
        assert before is not None and position >= before
        # Every record below the watermark left the queue, and only those.
        popped = sum(1 for o in offsets if o < position)
        assert tracker.released == popped
        assert len(tracker) == len(offsets) - popped
        assert advanced == sum(1 for o in offsets if before <= o < position)
        assert sorted(tracker.done_above()) == sorted(o for o in done if o >= position)
        head = tracker.head
        if position <= offsets[-1]:
            assert head is not None and head.offset == position
            assert not head.done
        else:
            assert head is None

    if completed == len(offsets):
        assert tracker.position == offsets[-1] + 1
        assert tracker.released == len(offsets)
        assert len(tracker) == 0


@given(
    st.lists(st.integers(min_value=0, max_value=10_000), min_size=1, max_size=20, unique=True),
    st.integers(min_value=0, max_value=10),
)
def test_delivering_a_non_increasing_offset_raises(offsets: list[int], back: int) -> None:
    offsets = sorted(offsets)
    tracker = OffsetTracker()
    for offset in offsets:
        tracker.deliver([_record(offset)], now=0.0)
    bad = offsets[-1] - back
    with pytest.raises(ValueError, match="offset order"):
        tracker.deliver([_record(bad)], now=0.0)
    # The rejected record was not tracked.
    assert tracker.last_delivered == offsets[-1]
    assert len(tracker) == len(offsets)


def test_a_client_position_past_the_last_record_is_the_position_once_all_is_done() -> None:
    tracker = OffsetTracker()
    records = [_record(o) for o in (3, 4)]
    for rec in records:
        tracker.deliver([rec], now=0.0)
    tracker.client_at(6)  # offset 5 is a transaction marker the client read over
    assert tracker.position == 3  # a delivered record is still running: it pins the watermark
    tracker.complete(records[0], now=0.0)
    tracker.complete(records[1], now=0.0)
    assert tracker.position == 6
    tracker.client_at(5)  # the client's position right after the last record says nothing new
    assert tracker.position == 6
    tracker.deliver([_record(6)], now=0.0)
    assert tracker.position == 6


def test_a_position_is_kept_before_any_record_and_forgotten_when_the_client_goes_back() -> None:
    tracker = OffsetTracker()
    tracker.client_at(9)  # only markers so far
    assert tracker.position == 9
    back = _record(7)  # the client went back (a seek): its old position no longer holds
    tracker.deliver([back], now=0.0)
    tracker.complete(back, now=0.0)
    assert tracker.position == 8


def test_drop_all_forgets_pending_records_without_releasing_them() -> None:
    tracker = OffsetTracker()
    records = [_record(o) for o in (3, 4, 7)]
    for rec in records:
        tracker.deliver([rec], now=0.0)
    tracker.complete(records[0], now=1.0)
    dropped = tracker.drop_all()
    assert [r.offset for r in dropped] == [4, 7]
    assert len(tracker) == 0
    assert tracker.released == 1


def test_pinned_since_follows_the_head() -> None:
    tracker = OffsetTracker()
    first, second = _record(0), _record(1)
    tracker.deliver([first], now=5.0)
    tracker.deliver([second], now=6.0)
    assert tracker.pinned_since == 5.0
    tracker.complete(second, now=7.0)  # not the head: the watermark is still pinned
    assert tracker.pinned_since == 5.0
    tracker.complete(first, now=8.0)
    assert tracker.pinned_since == 8.0


# ---------------------------------------------------------------- commit metadata


@given(
    st.integers(min_value=0, max_value=2**40),
    st.sets(st.integers(min_value=0, max_value=50_000), max_size=300),
)
def test_done_offsets_round_trip(position: int, relative: set[int]) -> None:
    done = {position + r for r in relative}
    metadata = encode_done(position, done)
    if not done:
        assert metadata == ""
    else:
        assert metadata.startswith(METADATA_PREFIX)
        assert len(metadata) <= METADATA_MAX_BYTES
    assert decode_done(position, metadata) == done


@given(
    st.integers(min_value=10, max_value=10_000),
    st.sets(st.integers(min_value=-10, max_value=100), max_size=50),
)
def test_offsets_below_the_position_are_not_encoded(position: int, relative: set[int]) -> None:
    done = {position + r for r in relative}
    assert decode_done(position, encode_done(position, done)) == {o for o in done if o >= position}


@given(
    st.integers(min_value=0, max_value=10_000),
    st.one_of(
        st.text(max_size=200),
        st.text(max_size=200).map(lambda s: METADATA_PREFIX + s),
        # Well-formed zlib of random small varints (bytes < 0x80, so no run is huge).
        st.lists(st.integers(min_value=0, max_value=0x7F), max_size=200).map(
            lambda b: METADATA_PREFIX + base64.b64encode(zlib.compress(bytes(b))).decode()
        ),
    ),
)
def test_garbage_metadata_never_raises(position: int, metadata: str) -> None:
    decoded = decode_done(position, metadata)
    assert isinstance(decoded, set)
    assert all(o >= position for o in decoded)


@pytest.mark.parametrize(
    "metadata",
    [
        None,
        "",
        "hello",
        "lh0:AAAA",  # another version's prefix
        "lh1:",  # prefix only
        "lh1:!!!not base64!!!",
        METADATA_PREFIX + base64.b64encode(b"not zlib").decode(),
        # A varint cut short: a continuation bit with nothing after it.
        METADATA_PREFIX + base64.b64encode(zlib.compress(b"\x05\x80")).decode(),
        # One good (gap, length) pair, then a cut varint: all or nothing, not a partial set.
        METADATA_PREFIX + base64.b64encode(zlib.compress(b"\x05\x01\x03\x80")).decode(),
        '{"consumer": "someone else"}',
    ],
)
def test_foreign_or_damaged_metadata_decodes_to_nothing(metadata: str | None) -> None:
    assert decode_done(100, metadata) == set()


@settings(max_examples=15, deadline=None)
@given(
    st.integers(min_value=0, max_value=10_000),
    st.integers(min_value=3_000, max_value=5_000),
    st.integers(min_value=0, max_value=2**32),
)
def test_oversized_sets_are_truncated_to_a_subset(position: int, runs: int, seed: int) -> None:
    rnd = random.Random(seed)
    # Thousands of short runs with random gaps: far more than fits in the metadata budget.
    done: set[int] = set()
    offset = position
    for _ in range(runs):
        offset += rnd.randint(2, 2_000)
        length = rnd.randint(1, 3)
        done.update(range(offset, offset + length))
        offset += length
    metadata = encode_done(position, done)
    assert 0 < len(metadata) <= METADATA_MAX_BYTES
    decoded = decode_done(position, metadata)
    assert decoded  # something survives
    assert decoded < done  # a strict subset: never an offset that wasn't done
    # The lowest runs are the ones kept (the highest are dropped).
    highest_kept = max(decoded)
    assert highest_kept < max(done)
    assert decoded == {o for o in done if o <= highest_kept}


@pytest.mark.timeout(2)
def test_duplicate_done_offsets_encode_like_their_set() -> None:
    # ``encode_done`` takes any iterable; a repeated offset must not change the result
    # (it once made a negative gap, on which ``_put_varint`` looped forever).
    assert encode_done(0, [5, 5, 6]) == encode_done(0, {5, 6})
