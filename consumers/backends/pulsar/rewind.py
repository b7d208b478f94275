"""Rewinding a Pulsar subscription: the subscription is recreated at the new position.

``Consumer.seek`` is the usual tool, but pulsar-lite drops the connection on it and moves
nothing, so the rewind works the same on every broker instead:

1. an **exclusive** consumer on the subscription proves nobody else consumes it (the broker
   refuses it while the workload's consumers are connected) and counts the backlog;
2. a **hold** subscription at the earliest message keeps the retained messages while
3. the subscription is deleted and created again at ``earliest`` or ``latest``; for a time, the
   messages published before it are acknowledged (skipped) once;
4. the hold subscription is deleted.

Counting reads the topic's retained messages once (no admin API is needed).
"""

from __future__ import annotations

import time
from collections.abc import Collection, Mapping, Sequence
from typing import Any, Final

import pulsar

from consumers.backends.admin import PositionChange, StartAt
from consumers.backends.pulsar.client import SUBSCRIPTION_TYPES, client_kwargs
from consumers.errors import RewindRefused

__all__ = ["PulsarRewinder"]

#: No message for this long means the end of the retained messages was reached.
_QUIET_MS: Final = 1000


class PulsarRewinder:
    """The :class:`~consumers.backends.admin.GroupRewinder` of ``subscription`` (of type
    ``subscription_type``, as the workload subscribes) on ``topics``."""

    kind = "pulsar subscription"

    def __init__(
        self,
        url: str,
        options: Mapping[str, Any],
        subscription: str,
        subscription_type: str,
        topics: Sequence[str],
        timeout: float = 60.0,
    ) -> None:
        self.group = subscription
        self._url = url
        self._options = dict(options)
        self._type = SUBSCRIPTION_TYPES[subscription_type]
        self._topics = list(topics)
        self._timeout = timeout

    def members(self) -> list[str]:
        """Always empty: the exclusive consumer of :meth:`rewind` is the check (asking first
        would create the subscription)."""
        return []

    def rewind(
        self, at: StartAt, partitions: Collection[int] | None, *, write: bool
    ) -> list[PositionChange]:
        if partitions is not None:
            raise RewindRefused(
                f"subscription {self.group!r} is rewound as a whole, without --partitions"
            )
        deadline = time.monotonic() + self._timeout
        client = pulsar.Client(self._url, **client_kwargs(self._options))
        try:
            return [self._topic(client, topic, at, write, deadline) for topic in self._topics]
        finally:
            client.close()

    def landed_ids(self) -> None:
        return None

    def _topic(
        self, client: pulsar.Client, topic: str, at: StartAt, write: bool, deadline: float
    ) -> PositionChange:
        try:
            probe = client.subscribe(topic, self.group, consumer_type=pulsar.ConsumerType.Exclusive)
        except pulsar.PulsarException as exc:
            raise RewindRefused(
                f"subscription {self.group!r} on {topic} has live consumers ({exc}); stop the "
                "workload's consumers first (under Dagster the rewind job does that)"
            ) from exc
        backlog = len(_drain(probe, deadline, ack_before=None))
        hold = client.subscribe(
            topic,
            f"{self.group}.lanehouse-rewind",
            initial_position=pulsar.InitialPosition.Earliest,
        )
        try:
            stamps = _drain(hold, deadline, ack_before=None)
            if at == "earliest":
                delivered = len(stamps)
            elif at == "latest":
                delivered = 0
            else:
                delivered = sum(1 for stamp in stamps if stamp >= at)
            if write:
                probe.unsubscribe()
                self._recreate(client, topic, at, deadline)
            else:
                probe.close()
        finally:
            hold.unsubscribe()
        return PositionChange(topic, -1, backlog, delivered, max(0, delivered - backlog))

    def _recreate(self, client: pulsar.Client, topic: str, at: StartAt, deadline: float) -> None:
        start = pulsar.InitialPosition.Latest if at == "latest" else pulsar.InitialPosition.Earliest
        consumer = client.subscribe(
            topic, self.group, initial_position=start, consumer_type=self._type
        )
        try:
            if isinstance(at, int):
                _drain(consumer, deadline, ack_before=at)
        finally:
            consumer.close()


def _drain(consumer: pulsar.Consumer, deadline: float, ack_before: int | None) -> list[int]:
    """Publish times of the messages delivered until the quiet end. With ``ack_before``, the
    messages published before it are acknowledged and reading stops at the first one after it
    (nothing else is acknowledged: closing the consumer gives the rest back)."""
    stamps: list[int] = []
    while True:
        if time.monotonic() > deadline:
            raise RewindRefused(f"reading {consumer.topic()} did not reach its end in time")
        try:
            message = consumer.receive(_QUIET_MS)
        except pulsar.Timeout:
            return stamps
        stamp = message.publish_timestamp()
        if ack_before is not None:
            if stamp >= ack_before:
                return stamps
            consumer.acknowledge(message)
        stamps.append(stamp)
