"""One ``ProducerLike`` over several producers, chosen by topic: a workload whose outputs and dead
letters go to different clusters still hands the engine a single producer.

    produce(topic, ...) ─► the producer of ``topic``'s cluster
    poll / flush / close ─► every producer (poll and flush share the timeout between them)
"""

from __future__ import annotations

import time
from collections.abc import Mapping
from typing import Any

from consumers.backends.base import ProducerFactory, ProducerLike
from consumers.errors import DeliveryError


class RoutedProducer:
    """Sends each topic's records through its own producer; a topic without a route is a
    ``KeyError`` (the routes come from the spec that names every output and dead-letter topic)."""

    def __init__(self, routes: Mapping[str, ProducerLike]) -> None:
        self._routes = dict(routes)
        self._producers = list({id(p): p for p in routes.values()}.values())

    def produce(self, topic: str, value: Any = None, key: Any = None, **kw: Any) -> None:
        self._routes[topic].produce(topic, value, key, **kw)

    def poll(self, timeout: float = -1) -> int:
        """Serve each producer's callbacks once, sharing ``timeout`` (negative: none waits, so
        one idle producer cannot hold up the others)."""
        share = timeout / len(self._producers) if timeout > 0 else 0.0
        return sum(producer.poll(share) for producer in self._producers)

    def flush(self, timeout: float = -1) -> int:
        """Flush every producer within ``timeout`` in all; the records still unacknowledged."""
        deadline = None if timeout < 0 else time.monotonic() + timeout
        left = 0
        for producer in self._producers:
            budget = -1.0 if deadline is None else max(deadline - time.monotonic(), 0.0)
            left += producer.flush(budget)
        return left

    def delivery_error(self, error: object) -> DeliveryError:
        """As its producers say: they are of one kind, the source's."""
        return self._producers[0].delivery_error(error)

    def close(self) -> None:
        for producer in self._producers:
            producer.close()


def routed_producer_factory(routes: Mapping[str, ProducerFactory]) -> ProducerFactory:
    """A factory of :class:`RoutedProducer`; topics sharing a factory share its producer."""

    def build() -> ProducerLike:
        built: dict[int, ProducerLike] = {}
        by_topic = {}
        for topic, factory in routes.items():
            if id(factory) not in built:
                built[id(factory)] = factory()
            by_topic[topic] = built[id(factory)]
        return RoutedProducer(by_topic)

    return build
