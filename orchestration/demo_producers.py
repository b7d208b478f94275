"""Send the demo's generated records (:mod:`orchestration.demo_events`) to the brokers.

Each record keeps the timestamp the generator gave it (Kafka's record timestamp, Pulsar's event
time): the lake files a record under the UTC day of that timestamp, so the days the demo
produces are the days the Spark assets get. Both functions return only once every record is
acknowledged, and raise :class:`BrokerError` if any was refused.
"""

from __future__ import annotations

from collections.abc import Sequence

from confluent_kafka import KafkaError, Message, Producer

from consumers.embedded.tansu import create_topic
from consumers.errors import BrokerError
from consumers.sample import PRODUCER_CONFIG
from orchestration.demo_events import DemoRecord

FLUSH_TIMEOUT = 60.0


def produce_kafka(
    bootstrap: str, topic: str, records: Sequence[DemoRecord], partitions: int
) -> None:
    create_topic(bootstrap, topic, partitions, exist_ok=True)
    failures: list[KafkaError] = []

    def on_delivery(err: KafkaError | None, _msg: Message) -> None:
        if err is not None:
            failures.append(err)

    producer = Producer({**PRODUCER_CONFIG, "bootstrap.servers": bootstrap})
    for record in records:
        while True:
            try:
                producer.produce(
                    topic,
                    record.value,
                    record.key,
                    timestamp=record.timestamp_ms,
                    on_delivery=on_delivery,
                )
                break
            except BufferError:
                producer.poll(0.05)
        producer.poll(0)
    if producer.flush(FLUSH_TIMEOUT) or failures:
        raise BrokerError(f"producing the demo records to {topic} failed: {failures[:3]}")


def produce_pulsar(service_url: str, topic: str, records: Sequence[DemoRecord]) -> None:
    import pulsar

    from consumers.backends.pulsar import CLIENT_LOGGER

    refused: list[str] = []

    def on_sent(result: pulsar.Result, _msg_id: pulsar.MessageId) -> None:
        if result != pulsar.Result.Ok:
            refused.append(str(result))

    client = pulsar.Client(service_url, logger=CLIENT_LOGGER)
    try:
        # block_if_queue_full: the client's default refuses sends past 1,000 in flight.
        producer = client.create_producer(topic, block_if_queue_full=True)
        for record in records:
            producer.send_async(
                record.value,
                on_sent,
                partition_key=record.key.decode(),
                event_timestamp=record.timestamp_ms,
            )
        producer.flush()
        producer.close()
    finally:
        client.close()
    if refused:
        raise BrokerError(f"producing the demo orders to {topic} failed: {refused[:3]}")
