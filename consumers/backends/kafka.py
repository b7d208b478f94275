"""confluent-kafka clients with the engine's defaults."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

from confluent_kafka import Consumer, TopicPartition

from consumers.source import ConsumerFactory, ConsumerLike

#: Defaults the engine relies on; a workload's ``source.config`` may override the tunables.
CONSUMER_DEFAULTS: dict[str, Any] = {
    # A new group starts at the beginning: landing data must not silently skip history.
    "auto.offset.reset": "earliest",
    # librdkafka's 1 s default idles a fast consumer whenever its local queue is full.
    "fetch.queue.backoff.ms": 10,
    # Eager range rebalances are clean on every broker we run; see docs/operations.md.
    "partition.assignment.strategy": "range",
    "enable.partition.eof": False,
}

#: Properties only the engine sets: it commits explicitly, and only what is durably done.
ENGINE_OWNED: dict[str, Any] = {
    "enable.auto.commit": False,
    "enable.auto.offset.store": False,
}


def kafka_consumer_factory(config: Mapping[str, Any]) -> ConsumerFactory:
    """A factory for :class:`consumers.source.SourceThread`: engine defaults < ``config``."""

    def build(on_commit: Callable[[Any, list[TopicPartition]], None]) -> ConsumerLike:
        merged = {**CONSUMER_DEFAULTS, **config, **ENGINE_OWNED, "on_commit": on_commit}
        consumer: ConsumerLike = Consumer(merged)
        return consumer

    return build
