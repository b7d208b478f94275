"""Send the demo's records (:mod:`orchestration.demo.events`) to the brokers.

Each record keeps the timestamp the generator gave it (Kafka's record timestamp, Pulsar's event
time): the lake files a record under the UTC day of that timestamp, so the days the demo
produces are the days the Spark assets get. A sink's ``close`` returns only once every record
is acknowledged, and raises :class:`BrokerError` if any was refused.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import TYPE_CHECKING, Protocol

from confluent_kafka import KafkaError, Message, Producer

from consumers import BrokerError
from consumers.dev.embedded.tansu import create_topic
from consumers.dev.sample import PRODUCER_CONFIG
from orchestration.demo.events import DemoRecord

if TYPE_CHECKING:
    import pulsar

FLUSH_TIMEOUT = 60.0


class RecordSink(Protocol):
    def send(self, record: DemoRecord) -> None: ...

    def poll(self) -> None:
        """Serve delivery reports without blocking."""

    def close(self) -> None:
        """Wait for every send to be acknowledged; raise BrokerError if any was refused."""


class KafkaSink:
    """Keyed sends to one Kafka topic, created with ``partitions`` if it does not exist."""

    def __init__(self, bootstrap: str, topic: str, partitions: int) -> None:
        create_topic(bootstrap, topic, partitions, exist_ok=True)
        self.topic = topic
        self._failures: list[KafkaError] = []
        self._producer = Producer({**PRODUCER_CONFIG, "bootstrap.servers": bootstrap})

    def _on_delivery(self, err: KafkaError | None, _msg: Message) -> None:
        if err is not None:
            self._failures.append(err)

    def send(self, record: DemoRecord) -> None:
        while True:
            try:
                self._producer.produce(
                    self.topic,
                    record.value,
                    record.key,
                    timestamp=record.timestamp_ms,
                    on_delivery=self._on_delivery,
                )
                break
            except BufferError:  # the local queue is full: serve deliveries, then retry
                self._producer.poll(0.05)
        self._producer.poll(0)

    def poll(self) -> None:
        self._producer.poll(0)

    def close(self) -> None:
        if self._producer.flush(FLUSH_TIMEOUT) or self._failures:
            raise BrokerError(
                f"producing demo records to {self.topic} failed: {self._failures[:3]}"
            )


class PulsarSink:
    """Sends to one Pulsar topic with the user id as partition key."""

    def __init__(self, service_url: str, topic: str) -> None:
        import pulsar

        from consumers.backends.pulsar.client_log import client_logger

        self.topic = topic
        self._refused: list[str] = []
        self._client = pulsar.Client(service_url, logger=client_logger())
        try:
            # block_if_queue_full: the client's default refuses sends past 1,000 in flight.
            self._producer = self._client.create_producer(topic, block_if_queue_full=True)
        except pulsar.PulsarException as exc:
            self._client.close()
            raise BrokerError(f"cannot produce to {topic} at {service_url}: {exc}") from exc

    def _on_sent(self, result: pulsar.Result, _msg_id: pulsar.MessageId) -> None:
        import pulsar

        if result != pulsar.Result.Ok:
            self._refused.append(str(result))

    def send(self, record: DemoRecord) -> None:
        self._producer.send_async(
            record.value,
            self._on_sent,
            partition_key=record.key.decode(),
            event_timestamp=record.timestamp_ms,
        )

    def poll(self) -> None:
        """Pulsar's client reports sends on its own threads."""

    def close(self) -> None:
        try:
            self._producer.flush()
            self._producer.close()
        finally:
            self._client.close()
        if self._refused:
            raise BrokerError(f"producing demo records to {self.topic} failed: {self._refused[:3]}")


def send_all(sink: RecordSink, records: Iterable[DemoRecord]) -> None:
    """Send every record, then wait for all of them to be acknowledged."""
    for record in records:
        sink.send(record)
    sink.close()


def produce_kafka(
    bootstrap: str, topic: str, records: Iterable[DemoRecord], partitions: int
) -> None:
    send_all(KafkaSink(bootstrap, topic, partitions), records)


def produce_pulsar(service_url: str, topic: str, records: Iterable[DemoRecord]) -> None:
    send_all(PulsarSink(service_url, topic), records)
