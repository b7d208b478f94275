"""The watch on topic ids: a topic deleted or recreated under a running workload is fenced (its
positions never committed again) and named; a broker that does not answer fences nothing.
The real-broker proof is ``tests/reliability/test_topic_faults.py``."""

from __future__ import annotations

from collections.abc import Mapping

import pytest

from consumers import BrokerError, SourceIdentity, TopicMissing, TopicReplaced
from consumers.engine.incarnations import IncarnationWatch

pytestmark = pytest.mark.unit


class Broker:
    """Topic ids as a broker would answer them; ``down`` makes every call fail."""

    def __init__(self, ids: dict[str, str]) -> None:
        self.ids = ids
        self.down = False
        self.calls = 0

    def identify(self, topics: list[str]) -> Mapping[str, SourceIdentity]:
        self.calls += 1
        if self.down:
            raise BrokerError("broker unreachable")
        found = {}
        for topic in topics:
            if topic not in self.ids:
                raise TopicMissing(f"topic {topic!r} does not exist")
            found[topic] = SourceIdentity("kafka", "b:9092", topic, self.ids[topic])
        return found


def test_an_unchanged_topic_is_not_fenced() -> None:
    broker = Broker({"a": "id-a", "b": "id-b"})
    watch = IncarnationWatch("w", broker.identify)
    watch.learn(["a", "b"])
    assert watch.check() == {}
    assert not watch.fenced("a") and not watch.replaced


def test_a_recreated_topic_is_fenced_and_named() -> None:
    broker = Broker({"a": "id-a", "b": "id-b"})
    watch = IncarnationWatch("w", broker.identify)
    watch.learn(["a", "b"])
    broker.ids["a"] = "id-a2"
    assert watch.check() == {"a": "topic 'a' was recreated (id id-a -> id-a2)"}
    assert watch.fenced("a") and not watch.fenced("b")
    error = watch.error()
    assert isinstance(error, TopicReplaced) and "workload w: topic 'a' was recreated" in str(error)


def test_a_deleted_topic_is_fenced_and_the_others_still_checked() -> None:
    broker = Broker({"a": "id-a", "b": "id-b"})
    watch = IncarnationWatch("w", broker.identify)
    watch.learn(["a", "b"])
    del broker.ids["a"]
    broker.ids["b"] = "id-b2"
    found = watch.check()
    assert found == {
        "a": "topic 'a' was deleted (id id-a)",
        "b": "topic 'b' was recreated (id id-b -> id-b2)",
    }
    assert watch.fenced("a") and watch.fenced("b")


def test_a_broker_that_does_not_answer_fences_nothing() -> None:
    broker = Broker({"a": "id-a"})
    watch = IncarnationWatch("w", broker.identify)
    watch.learn(["a"])
    broker.down = True
    assert watch.check() == {}
    broker.down = False
    broker.ids["a"] = "id-a2"
    assert watch.check() == {"a": "topic 'a' was recreated (id id-a -> id-a2)"}


def test_a_check_of_named_topics_asks_only_for_those_it_knows() -> None:
    broker = Broker({"a": "id-a", "b": "id-b"})
    watch = IncarnationWatch("w", broker.identify)
    watch.learn(["a"])
    broker.ids["b"] = "id-b2"  # never learned: not this workload's concern
    assert watch.check(["a", "b"]) == {}
    calls = broker.calls
    assert watch.check(["elsewhere"]) == {} and broker.calls == calls, "asked for nothing"


def test_topics_without_ids_are_not_watched() -> None:
    broker = Broker({"a": ""})  # a broker without topic ids
    watch = IncarnationWatch("w", broker.identify)
    watch.learn(["a"])
    broker.ids["a"] = "id-a"
    assert watch.check() == {}
