"""Dead-letter headers: what the engine writes is what `lanehouse dead-letters` reads back."""

from __future__ import annotations

import re
from typing import Any

import pytest

from consumers.dead_letters.selection import parse_since
from consumers.engine import dead_letter_headers as h
from consumers.engine.dead_letter_headers import (
    DeadLetterInfo,
    decode_dead_letter,
    encode_dead_letter_headers,
    replay_headers,
)

FAILURE: dict[str, Any] = {
    "workload": "orders",
    "source_topic": "orders.events",
    "source_partition": 3,
    "source_offset": 1234567890123,
    "attempts": 5,
    "error_type": "HandlerTimeout",
    "error_message": "took longer than 30 s: ünïcode ok",
    "first_failure_ms": 1_714_000_000_000,
    "last_failure_ms": 1_714_000_012_345,
}

LANEHOUSE_NAMES = [
    h.HEADER_WORKLOAD,
    h.HEADER_SOURCE_TOPIC,
    h.HEADER_SOURCE_PARTITION,
    h.HEADER_SOURCE_OFFSET,
    h.HEADER_ATTEMPTS,
    h.HEADER_ERROR_TYPE,
    h.HEADER_ERROR_MESSAGE,
    h.HEADER_FAILURE_FIRST_MS,
    h.HEADER_FAILURE_LAST_MS,
]


def test_round_trip() -> None:
    info = decode_dead_letter(encode_dead_letter_headers(None, **FAILURE))
    assert info == DeadLetterInfo(**FAILURE, replay_count=0, original_headers=())


def test_header_names_are_the_documented_ones() -> None:
    names = [name for name, _ in encode_dead_letter_headers([], **FAILURE)]
    assert names == [
        "lanehouse.workload",
        "lanehouse.source.topic",
        "lanehouse.source.partition",
        "lanehouse.source.offset",
        "lanehouse.attempts",
        "lanehouse.error.type",
        "lanehouse.error.message",
        "lanehouse.failure.first_ms",
        "lanehouse.failure.last_ms",
    ]
    assert h.HEADER_REPLAY_COUNT == "lanehouse.replay.count"
    values = dict(encode_dead_letter_headers([], **FAILURE))
    assert values[h.HEADER_SOURCE_PARTITION] == b"3"
    assert values[h.HEADER_ERROR_MESSAGE] == FAILURE["error_message"].encode()


def test_original_headers_come_first_in_order_and_survive_decoding() -> None:
    original = [("trace", b"abc"), ("tag", b"1"), ("tag", b"2"), ("empty", b""), ("null", None)]
    headers = encode_dead_letter_headers(original, **FAILURE)  # type: ignore[arg-type]
    assert headers[: len(original)] == original
    assert [name for name, _ in headers[len(original) :]] == LANEHOUSE_NAMES
    assert decode_dead_letter(headers).original_headers == tuple(original)


def test_stale_lanehouse_headers_are_dropped_except_replay_count() -> None:
    # The source record was a replay of an earlier dead letter that carried all of these.
    earlier = encode_dead_letter_headers(
        [("trace", b"abc")], **{**FAILURE, "attempts": 1, "error_type": "OldError"}
    )
    original = [*earlier, (h.HEADER_REPLAY_COUNT, b"2"), ("lanehouse.custom", b"x")]
    headers = encode_dead_letter_headers(original, **FAILURE)

    assert headers[:2] == [("trace", b"abc"), (h.HEADER_REPLAY_COUNT, b"2")]
    assert [name for name, _ in headers[2:]] == LANEHOUSE_NAMES  # one of each, the new ones
    info = decode_dead_letter(headers)
    assert (info.attempts, info.error_type, info.replay_count) == (5, "HandlerTimeout", 2)
    assert info.original_headers == (("trace", b"abc"),)


def test_error_message_is_cut_to_1000_characters() -> None:
    headers = encode_dead_letter_headers(None, **{**FAILURE, "error_message": "é" * 5000})
    assert decode_dead_letter(headers).error_message == "é" * h.ERROR_MESSAGE_MAX_CHARS


def test_negative_numbers_are_refused_when_encoding() -> None:
    with pytest.raises(ValueError, match=re.escape("lanehouse.source.offset")):
        encode_dead_letter_headers(None, **{**FAILURE, "source_offset": -1})


def test_replay_headers_add_one_to_the_replay_count() -> None:
    first = decode_dead_letter(encode_dead_letter_headers([("trace", b"abc")], **FAILURE))
    assert replay_headers(first) == [("trace", b"abc"), (h.HEADER_REPLAY_COUNT, b"1")]
    again = decode_dead_letter(encode_dead_letter_headers(replay_headers(first), **FAILURE))  # type: ignore[arg-type]
    assert again.replay_count == 1
    assert replay_headers(again) == [("trace", b"abc"), (h.HEADER_REPLAY_COUNT, b"2")]


@pytest.mark.parametrize("name", [*LANEHOUSE_NAMES])
def test_a_missing_header_is_named(name: str) -> None:
    headers = [(n, v) for n, v in encode_dead_letter_headers(None, **FAILURE) if n != name]
    with pytest.raises(ValueError, match=re.escape(f"'{name}' is missing")):
        decode_dead_letter(headers)


@pytest.mark.parametrize(
    ("name", "value", "problem"),
    [
        (h.HEADER_SOURCE_OFFSET, b"12x", "not a non-negative integer"),
        (h.HEADER_ATTEMPTS, b"-1", "not a non-negative integer"),
        (h.HEADER_SOURCE_PARTITION, b"", "not a non-negative integer"),
        (h.HEADER_REPLAY_COUNT, b"one", "not a non-negative integer"),
        (h.HEADER_WORKLOAD, None, "is null"),
        (h.HEADER_ERROR_MESSAGE, b"\xff\xfe", "not UTF-8"),
    ],
)
def test_a_malformed_header_is_named(name: str, value: bytes | None, problem: str) -> None:
    headers: list[tuple[str, bytes | None]] = [
        *encode_dead_letter_headers(None, **FAILURE),
        (name, value),  # the last value of a repeated header counts
    ]
    with pytest.raises(ValueError, match=f"{re.escape(repr(name))}.*{problem}"):
        decode_dead_letter(headers)


def test_no_headers_at_all_is_not_a_dead_letter() -> None:
    with pytest.raises(ValueError, match=re.escape("'lanehouse.workload' is missing")):
        decode_dead_letter(None)


# `--since` of `lanehouse dead-letters`, parsed in consumers.dead_letters.selection.

NOW_MS = 1_714_000_000_000


@pytest.mark.parametrize(
    ("value", "expected"),
    [
        ("30m", NOW_MS - 30 * 60_000),
        ("2h", NOW_MS - 2 * 3_600_000),
        ("1.5h", NOW_MS - 5_400_000),
        ("500ms", NOW_MS - 500),
        ("2024-04-24T23:06:40Z", NOW_MS),
        ("2024-04-24T23:06:40", NOW_MS),  # no offset: UTC
        ("2024-04-25T01:06:40+02:00", NOW_MS),
        ("2024-04-24", NOW_MS - (23 * 3600 + 6 * 60 + 40) * 1000),
    ],
)
def test_since_accepts_durations_ago_and_iso_times(value: str, expected: int) -> None:
    assert parse_since(value, now_ms=NOW_MS) == expected


@pytest.mark.parametrize("value", ["30", "yesterday", "1d", "-5m", ""])
def test_since_refuses_anything_else(value: str) -> None:
    with pytest.raises(ValueError, match="duration ago"):
        parse_since(value, now_ms=NOW_MS)
