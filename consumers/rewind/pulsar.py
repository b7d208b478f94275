"""Rewinding a Pulsar subscription: the subscription is recreated at the new position.

``Consumer.seek`` is the usual tool, but pulsar-lite drops the connection on it and moves
nothing, so the rewind works the same on every broker instead:

1. an **exclusive** consumer on the subscription proves nobody else consumes it (the broker
   refuses it while the workload's consumers are connected) and counts the backlog;
2. a **hold** subscription at the earliest message keeps the retained messages while
3. the subscription is deleted and created again at ``earliest`` or ``latest``; for a time, the
   messages published before it are acknowledged (skipped) once;
4. the hold subscription is deleted.

Counting reads the topic's retained messages once (no admin API is needed). Landed files are
left alone: messages delivered again land again, and the clean tables deduplicate them by their
lineage key (docs/lake.md).
"""

from __future__ import annotations

import time
from typing import Any, Final

import pulsar

from consumers.backends.pulsar.client import client_kwargs
from consumers.config.sources import PulsarSourceSpec
from consumers.config.spec import WorkloadSpec
from consumers.errors import RewindRefused
from consumers.rewind.plan import Move, RewindPlan
from consumers.rewind.target import RewindTarget

__all__ = ["rewind_pulsar"]

#: No message for this long means the end of the retained messages was reached.
_QUIET_MS: Final = 1000
_TYPES: Final = {
    "shared": pulsar.ConsumerType.Shared,
    "failover": pulsar.ConsumerType.Failover,
    "key_shared": pulsar.ConsumerType.KeyShared,
    "exclusive": pulsar.ConsumerType.Exclusive,
}


def rewind_pulsar(
    spec: WorkloadSpec, target: RewindTarget, dry_run: bool, timeout: float = 60.0
) -> RewindPlan:
    """Count (and unless ``dry_run`` apply) the rewind of every topic of the subscription."""
    source = spec.source
    if not isinstance(source, PulsarSourceSpec):
        raise TypeError(f"workload {spec.name!r} reads Kafka")
    deadline = time.monotonic() + timeout
    client = pulsar.Client(source.service_url, **client_kwargs(source.client_options()))
    try:
        moves = tuple(
            _rewind_topic(client, source, topic, target, dry_run, deadline)
            for topic in source.topics
        )
    finally:
        client.close()
    return RewindPlan(
        workload=spec.name,
        kind="pulsar subscription",
        group=source.subscription,
        target=target.describe(),
        moves=moves,
        applied=not dry_run,
    )


def _rewind_topic(
    client: pulsar.Client,
    source: PulsarSourceSpec,
    topic: str,
    target: RewindTarget,
    dry_run: bool,
    deadline: float,
) -> Move:
    name = source.subscription
    try:
        probe = client.subscribe(topic, name, consumer_type=pulsar.ConsumerType.Exclusive)
    except pulsar.PulsarException as exc:
        raise RewindRefused(
            f"subscription {name!r} on {topic} has live consumers ({exc}); stop the workload's "
            "consumers first (under Dagster the rewind job does that)"
        ) from exc
    backlog = len(_drain(probe, deadline, ack_before=None))
    hold = client.subscribe(
        topic, f"{name}.lanehouse-rewind", initial_position=pulsar.InitialPosition.Earliest
    )
    try:
        stamps = _drain(hold, deadline, ack_before=None)
        if target.kind == "earliest":
            delivered = len(stamps)
        elif target.kind == "latest":
            delivered = 0
        else:
            assert target.at_ms is not None
            delivered = sum(1 for stamp in stamps if stamp >= target.at_ms)
        if dry_run:
            probe.close()
        else:
            probe.unsubscribe()
            _recreate(client, source, topic, target, deadline)
    finally:
        hold.unsubscribe()
    return Move(
        topic=topic,
        partition=-1,
        committed=backlog,
        new=delivered,
        again=max(0, delivered - backlog),
    )


def _recreate(
    client: pulsar.Client,
    source: PulsarSourceSpec,
    topic: str,
    target: RewindTarget,
    deadline: float,
) -> None:
    start = (
        pulsar.InitialPosition.Latest
        if target.kind == "latest"
        else pulsar.InitialPosition.Earliest
    )
    options: dict[str, Any] = {"consumer_type": _TYPES[source.subscription_type]}
    consumer = client.subscribe(topic, source.subscription, initial_position=start, **options)
    try:
        if target.at_ms is not None:
            _drain(consumer, deadline, ack_before=target.at_ms)
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
