"""The Kafka producer of a workload's outputs and dead letters: sized to fit any record its source
can deliver, and telling a record that can never be written from one worth sending again.

    record_limit(consumer properties)   → message.max.bytes: the largest record the consumer
                                          can receive, plus room for dead-letter headers
    KafkaProducer.delivery_error(e)     → what a refusal (KafkaException from produce) or a
                                          failed delivery (KafkaError) means: DeliveryError,
                                          permanent or transient

librdkafka's producer keeps a 1 MB ``message.max.bytes`` by default while its consumer receives
records up to ``receive.message.max.bytes`` (100 MB): without the sizing, a 5 MB record that
fails its handler could never be dead-lettered. A write refused for good (too large for the
broker's topic, not authorized) is a permanent :class:`DeliveryError`, so the engine stops the
workload instead of sending it again forever.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from confluent_kafka import KafkaError, KafkaException, Producer

from consumers.backends.base import delivery_failure
from consumers.errors import DeliveryError

#: The consumer properties that bound the largest record a consumer receives, with librdkafka's
#: defaults. ``receive.message.max.bytes`` is the hard one (a fetch answer above it fails); the
#: fetch limits are soft (a first batch larger than them is still returned).
RECEIVE_LIMITS: Mapping[str, int] = {
    "receive.message.max.bytes": 100_000_000,
    "fetch.max.bytes": 52_428_800,
    "max.partition.fetch.bytes": 1_048_576,
    "message.max.bytes": 1_000_000,
}
#: Room for what a dead letter adds to its record: the ``lanehouse.*`` headers (under 5 kB).
HEADER_ROOM = 65_536
#: librdkafka's ceiling for ``message.max.bytes``.
LARGEST_MESSAGE = 1_000_000_000


def record_limit(consumer_config: Mapping[str, Any]) -> int:
    """A producer ``message.max.bytes`` that fits any record a consumer with these properties can
    deliver, plus its dead-letter headers: 100,065,536 with librdkafka's defaults (below Kafka's
    100 MiB ``socket.request.max.bytes``)."""
    largest = max(int(consumer_config.get(key, default)) for key, default in RECEIVE_LIMITS.items())
    return min(largest + HEADER_ROOM, LARGEST_MESSAGE)


#: Errors that fail a record the same way however often it is sent.
PERMANENT_ERRORS = frozenset(
    {
        KafkaError.MSG_SIZE_TOO_LARGE,
        KafkaError.RECORD_LIST_TOO_LARGE,
        KafkaError.INVALID_RECORD,
        KafkaError.TOPIC_EXCEPTION,
        KafkaError.TOPIC_AUTHORIZATION_FAILED,
        KafkaError.CLUSTER_AUTHORIZATION_FAILED,
        KafkaError.TRANSACTIONAL_ID_AUTHORIZATION_FAILED,
        KafkaError.POLICY_VIOLATION,
        KafkaError.UNSUPPORTED_VERSION,
        KafkaError._INVALID_ARG,
    }
)


def kafka_delivery_error(error: KafkaError) -> DeliveryError:
    """``error`` told permanent (:data:`PERMANENT_ERRORS`, or a fatal error: the idempotent
    producer refuses everything after one) or transient (timeouts, a broker away)."""
    return DeliveryError(
        f"{error.name()}: {error.str()}",
        permanent=bool(error.fatal()) or error.code() in PERMANENT_ERRORS,
    )


class KafkaProducer(Producer):
    """``confluent_kafka.Producer`` (its ``produce`` untouched, the hot path) that tells what its
    errors mean: ``KafkaException`` raised by ``produce`` (refused before sending, e.g. over
    ``message.max.bytes``) and ``KafkaError`` given to ``on_delivery``."""

    def delivery_error(self, error: object) -> DeliveryError:
        if isinstance(error, KafkaException) and isinstance(error.args[0], KafkaError):
            error = error.args[0]
        if isinstance(error, KafkaError):
            return kafka_delivery_error(error)
        return delivery_failure(error)
