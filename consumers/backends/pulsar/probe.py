"""Which messages a Pulsar subscription has not acknowledged: the probe the demo, the bench and
the tests use where Kafka would compare committed offsets with the log end."""

from __future__ import annotations

import time
from typing import Final

import pulsar

from consumers.backends.pulsar.client import client_kwargs
from consumers.errors import BrokerError

#: Property of the marker message :func:`unacknowledged` publishes.
PROBE_PROPERTY: Final = "lanehouse-ack-probe"
#: A message id as ``(partition, ledger, entry, batch index)``.
MessageKey = tuple[int, int, int, int]


def message_key(message_id: pulsar.MessageId) -> MessageKey:
    return (
        message_id.partition(),
        message_id.ledger_id(),
        message_id.entry_id(),
        message_id.batch_index(),
    )


def unacknowledged(
    service_url: str, subscription: str, topic: str, timeout: float = 30.0
) -> list[MessageKey]:
    """Ids of the messages of ``topic`` that ``subscription`` has not acknowledged.

    Pulsar has no committed offset to compare with the end of a topic, so this publishes one
    marker message to every partition and reads the subscription until all markers came back:
    in each partition, what the subscription would redeliver comes before its marker (a partly
    acknowledged producer batch comes back, and counts, whole). Only the markers are
    acknowledged; they stay in the topic, so other subscriptions will read them (their
    ``lanehouse-ack-probe`` property tells them apart). Run it while no other consumer is on
    the subscription (pulsar-lite allows only one). :class:`BrokerError` if a marker does not
    come back within ``timeout`` seconds.
    """
    client = pulsar.Client(service_url, **client_kwargs({}))
    found: list[MessageKey] = []
    try:
        consumer = client.subscribe(
            topic,
            subscription,
            consumer_type=pulsar.ConsumerType.Shared,
            initial_position=pulsar.InitialPosition.Earliest,
        )
        partitions = len(client.get_topic_partitions(topic))
        for index in range(partitions):
            # Routed rather than sent to the partition's own name, which pulsar-lite would
            # treat as a new topic.
            producer = client.create_producer(
                topic, batching_enabled=False, message_router=lambda _m, _n, i=index: i
            )
            producer.send(b"", properties={PROBE_PROPERTY: "1"})
            producer.close()
        markers = 0
        deadline = time.monotonic() + timeout
        while markers < partitions:
            left_ms = int((deadline - time.monotonic()) * 1000)
            try:
                msg = consumer.receive(max(left_ms, 1))
            except pulsar.Timeout as exc:
                raise BrokerError(
                    f"the acknowledgement probe of {subscription!r} on {topic} did not come "
                    f"back within {timeout:.0f}s",
                    topic=topic,
                    retriable=True,
                ) from exc
            if PROBE_PROPERTY in msg.properties():
                consumer.acknowledge(msg)
                markers += 1
            else:
                found.append(message_key(msg.message_id()))
        consumer.close()
    finally:
        client.close()
    return found
