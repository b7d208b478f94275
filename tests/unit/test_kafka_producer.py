"""The Kafka producer of outputs and dead letters, without a broker: sized from the source's
consumer, and telling a refusal for good from a failure that can pass."""

from __future__ import annotations

from collections.abc import Iterator

import pytest
from confluent_kafka import KafkaError, KafkaException

from consumers.backends.base import ProducerFactory
from consumers.backends.kafka.consumer import kafka_producer_factory
from consumers.backends.kafka.producer import KafkaProducer, record_limit

pytestmark = pytest.mark.unit

#: Nothing listens here: ``produce`` only queues, so a size refusal is all it can report.
NOWHERE = {"bootstrap.servers": "127.0.0.1:9", "log_level": 0}
FIVE_MB = b"x" * 5_000_000


def kafka_producer(factory: ProducerFactory) -> KafkaProducer:
    """The factory's producer, as its class: mypy takes ``ProducerLike`` and ``KafkaProducer``
    for disjoint (``Producer.produce`` takes no ``**kw``), so narrow from ``object``."""
    producer: object = factory()
    assert isinstance(producer, KafkaProducer)
    return producer


@pytest.fixture
def producers() -> Iterator[list[KafkaProducer]]:
    made: list[KafkaProducer] = []
    yield made
    for producer in made:
        producer.purge()
        producer.flush(0)


def test_the_limit_fits_what_the_consumer_can_receive_plus_dead_letter_headers() -> None:
    assert record_limit({}) == 100_000_000 + 65_536  # librdkafka's receive.message.max.bytes
    assert record_limit({"receive.message.max.bytes": "200000000"}) == 200_065_536
    assert record_limit({"fetch.max.bytes": 150_000_000}) == 150_065_536
    assert record_limit({"receive.message.max.bytes": 2_000_000_000}) == 1_000_000_000


def test_a_5_mb_record_is_queued_without_any_size_setting(producers: list[KafkaProducer]) -> None:
    producer = kafka_producer(kafka_producer_factory(NOWHERE))
    producers.append(producer)
    producer.produce("t", FIVE_MB, b"k")  # librdkafka's own 1 MB default raises here


def test_an_explicit_smaller_limit_is_kept_and_its_refusal_is_for_good(
    producers: list[KafkaProducer],
) -> None:
    producer = kafka_producer(kafka_producer_factory({**NOWHERE, "message.max.bytes": 1_000_000}))
    producers.append(producer)
    with pytest.raises(KafkaException) as refused:
        producer.produce("t", FIVE_MB, b"k")
    failure = producer.delivery_error(refused.value)
    assert failure.permanent and failure.reason.startswith("MSG_SIZE_TOO_LARGE")


def test_the_sources_consumer_sizes_a_producer_on_another_cluster(
    producers: list[KafkaProducer],
) -> None:
    source = {"receive.message.max.bytes": 2_000_000, "fetch.max.bytes": 1_500_000}
    producer = kafka_producer(kafka_producer_factory(NOWHERE, source))
    producers.append(producer)
    producer.produce("t", b"x" * 2_000_000)  # what that consumer can receive fits
    with pytest.raises(KafkaException):
        producer.produce("t", FIVE_MB)  # it could never have delivered this


@pytest.mark.parametrize(
    ("error", "permanent"),
    [
        (KafkaError(KafkaError.MSG_SIZE_TOO_LARGE), True),
        (KafkaError(KafkaError.TOPIC_AUTHORIZATION_FAILED), True),
        (KafkaError(KafkaError.OUT_OF_ORDER_SEQUENCE_NUMBER, "fenced", fatal=True), True),
        (KafkaError(KafkaError._MSG_TIMED_OUT), False),
        (KafkaError(KafkaError.NOT_LEADER_FOR_PARTITION), False),
        (KafkaError(KafkaError.UNKNOWN_TOPIC_OR_PART), False),
        (TypeError("a str value"), True),
    ],
    ids=lambda e: e.name() if isinstance(e, KafkaError) else str(e),
)
def test_a_failure_is_told_permanent_or_transient(
    error: object, permanent: bool, producers: list[KafkaProducer]
) -> None:
    producer = KafkaProducer(NOWHERE)
    producers.append(producer)
    assert producer.delivery_error(error).permanent is permanent
