"""Pure parts of the sample producer and topic-name rules; no broker needed."""

from __future__ import annotations

import json
import random
from collections import Counter
from itertools import islice

import pytest

from consumers.config.names import validate_topic_name
from consumers.dev.sample import (
    TokenBucket,
    _key_order,
    _sample_chunks,
    produce_pulsar_sample,
    produce_sample,
)


class FakeTime:
    def __init__(self) -> None:
        self.now = 100.0
        self.slept: list[float] = []

    def clock(self) -> float:
        return self.now

    def sleep(self, seconds: float) -> None:
        self.slept.append(seconds)
        self.now += seconds


def test_token_bucket_allows_a_burst_then_paces_at_rate() -> None:
    fake = FakeTime()
    bucket = TokenBucket(rate=100, burst=10, clock=fake.clock, sleep=fake.sleep)
    bucket.acquire(10)
    assert fake.slept == []
    start = fake.now
    for _ in range(50):
        bucket.acquire(5)
    assert fake.now - start == pytest.approx(250 / 100)


def test_token_bucket_refills_while_idle_but_not_past_burst() -> None:
    fake = FakeTime()
    bucket = TokenBucket(rate=10, burst=5, clock=fake.clock, sleep=fake.sleep)
    bucket.acquire(5)
    fake.now += 60  # a long pause earns at most `burst` tokens
    bucket.acquire(5)
    assert fake.slept == []
    bucket.acquire(1)
    assert fake.slept == [pytest.approx(0.1)]


def test_token_bucket_rejects_bad_settings() -> None:
    with pytest.raises(ValueError, match="rate"):
        TokenBucket(rate=0, burst=1)
    with pytest.raises(ValueError, match="burst"):
        TokenBucket(rate=1, burst=0.5)


def test_key_order_is_balanced_shuffled_and_seeded() -> None:
    first = list(islice(_key_order(10, random.Random(7)), 1000))
    assert Counter(first) == dict.fromkeys(range(10), 100)
    assert first[:10] != list(range(10)) or first[10:20] != list(range(10))
    assert first == list(islice(_key_order(10, random.Random(7)), 1000))


@pytest.mark.parametrize("name", ["a", "topic.v1_x-Y9", "x" * 249, "..a", "-"])
def test_valid_topic_names(name: str) -> None:
    assert validate_topic_name(name) == name


@pytest.mark.parametrize(
    ("name", "why"),
    [
        ("../x", "only ASCII letters"),
        ("", "non-empty"),
        (".", "reserved"),
        ("..", "reserved"),
        ("x" * 250, "at most 249"),
        ("a b", "only ASCII letters"),
        ("tópico", "only ASCII letters"),
    ],
)
def test_invalid_topic_names(name: str, why: str) -> None:
    with pytest.raises(ValueError, match=why):
        validate_topic_name(name)


@pytest.mark.parametrize(
    ("kwargs", "why"),
    [
        ({"count": -1}, "count"),
        ({"keys": 0}, "keys"),
        ({"rate": 0.0}, "rate"),
        ({"value_size": -5}, "value_size"),
    ],
)
def test_produce_sample_rejects_bad_arguments_before_connecting(
    kwargs: dict[str, float], why: str
) -> None:
    args: dict[str, float] = {"count": 1, "keys": 1, **kwargs}
    with pytest.raises(ValueError, match=why):
        produce_sample("127.0.0.1:1", "t", **args)  # type: ignore[arg-type]
    with pytest.raises(ValueError, match=why):
        produce_pulsar_sample("pulsar://127.0.0.1:1", "t", **args)  # type: ignore[arg-type]


def test_produce_pulsar_sample_rejects_a_bad_topic_before_connecting() -> None:
    with pytest.raises(ValueError, match="invalid Pulsar topic"):
        produce_pulsar_sample("pulsar://127.0.0.1:1", "public/default/x", 1, 1)


def test_sample_chunks_number_each_keys_records_and_use_the_prefix() -> None:
    chunks = [(n, list(chunk)) for n, chunk in _sample_chunks(25, 3, None, 0, 7, "user-")]
    assert [n for n, _ in chunks] == [25]
    seqs: dict[bytes, list[int]] = {}
    for key, value in chunks[0][1]:
        record = json.loads(value)
        assert record["key"].encode() == key
        seqs.setdefault(key, []).append(record["seq"])
    assert sorted(seqs) == [b"user-0", b"user-1", b"user-2"]
    assert sorted(len(v) for v in seqs.values()) == [8, 8, 9]
    assert all(v == list(range(len(v))) for v in seqs.values())
    again = [(n, list(chunk)) for n, chunk in _sample_chunks(25, 3, None, 0, 7, "user-")]
    assert [k for k, _ in again[0][1]] == [k for k, _ in chunks[0][1]]


def test_paced_sample_chunks_are_a_hundredth_of_a_second() -> None:
    sizes = [n for n, _ in _sample_chunks(2500, 1, 100_000.0, 0, 0, "k")]
    assert sizes == [1000, 1000, 500]
