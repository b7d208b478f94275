"""Producing to Pulsar for a workload's outputs and dead letters, behind ``ProducerLike``.

pulsar-client refuses a message larger than the broker's ``maxMessageSize`` (5 MiB by default),
counting its properties: a record the source delivered just under it no longer fits once a dead
letter's ``lanehouse.*`` headers join it, and a record that reached the source in chunks never
fits. Dead-letter topics (``chunked_topics``) are therefore sent unbatched with chunking on, so
any record the source can deliver can be dead-lettered; outputs stay batched, and one over the
limit fails for good (a permanent ``DeliveryError``), which stops the workload.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable, Mapping
from typing import Any

import pulsar

from consumers.backends.base import ProducerFactory, ProducerLike, delivery_failure
from consumers.backends.pulsar.client import PulsarSettings, client_kwargs
from consumers.errors import DeliveryError

log = logging.getLogger("lanehouse.pulsar")

#: Send results that fail a message the same way however often it is sent.
PERMANENT_RESULTS = frozenset(
    {
        pulsar.Result.MessageTooBig,
        pulsar.Result.AuthenticationError,
        pulsar.Result.AuthorizationError,
        pulsar.Result.InvalidMessage,
        pulsar.Result.InvalidTopicName,
        pulsar.Result.InvalidConfiguration,
        pulsar.Result.IncompatibleSchema,
        pulsar.Result.NotAllowedError,
        pulsar.Result.OperationNotSupported,
        pulsar.Result.TopicTerminated,
        pulsar.Result.UnsupportedVersionError,
    }
)
#: The same, raised by ``create_producer``.
PERMANENT_EXCEPTIONS = (
    pulsar.exceptions.AuthenticationError,
    pulsar.exceptions.AuthorizationError,
    pulsar.exceptions.InvalidTopicName,
    pulsar.exceptions.InvalidConfiguration,
    pulsar.exceptions.NotAllowedError,
    pulsar.exceptions.TopicTerminated,
)


class PulsarProducer:
    """A ``ProducerLike`` over pulsar-client: one producer per topic, created on first use.

    Never blocks the caller: past ``max_pending`` unacknowledged sends it raises ``BufferError``
    (the engine retries shortly), so the client's own queue never refuses a message. Keys become
    the partition key and headers become message properties; Pulsar needs both as UTF-8 text,
    so other bytes fail that record's delivery with a clear error.
    """

    def __init__(
        self,
        service_url: str,
        client_options: Mapping[str, Any],
        max_pending: int = 10_000,
        producer_options: Mapping[str, Any] | None = None,
        chunked_topics: frozenset[str] = frozenset(),
    ) -> None:
        self._client = pulsar.Client(service_url, **client_kwargs(client_options))
        self._chunked = chunked_topics
        #: ``create_producer`` options over the defaults (batching every 5 ms).
        self._options = {"batching_max_publish_delay_ms": 5, **(producer_options or {})}
        self._producers: dict[str, pulsar.Producer] = {}
        self._max_pending = max_pending
        self._pending = 0
        self._lock = threading.Lock()
        self._idle = threading.Condition(self._lock)

    def produce(self, topic: str, value: Any = None, key: Any = None, **kw: Any) -> None:
        on_delivery: Callable[[DeliveryError | None, Any], None] = kw.get("on_delivery") or _ignore
        if self._pending >= self._max_pending:
            raise BufferError("too many unacknowledged Pulsar sends")
        try:
            partition_key = key.decode() if key else None
            properties = {name: data.decode() for name, data in kw.get("headers") or ()}
        except UnicodeDecodeError:
            text = "Pulsar keys and properties must be UTF-8 text"
            on_delivery(DeliveryError(text, permanent=True), None)
            return
        producer = self._producers.get(topic) or self._create(topic)
        with self._lock:
            self._pending += 1

        def sent(result: pulsar.Result, _msg_id: pulsar.MessageId) -> None:
            with self._idle:
                self._pending -= 1
                self._idle.notify_all()
            on_delivery(None if result == pulsar.Result.Ok else _failure(result), None)

        try:  # a None value is sent as a null value: tombstones stay tombstones
            producer.send_async(
                value, sent, properties=properties or None, partition_key=partition_key
            )
        except BaseException:
            with self._idle:
                self._pending -= 1
                self._idle.notify_all()
            raise

    def poll(self, timeout: float = -1) -> int:
        """Callbacks run on pulsar-client's own threads; nothing to serve here."""
        time.sleep(max(timeout, 0))
        return 0

    def flush(self, timeout: float = -1) -> int:
        """Wait for every send to be acknowledged; the number still pending."""
        deadline = None if timeout < 0 else time.monotonic() + timeout
        for producer in list(self._producers.values()):
            producer.flush()
        with self._idle:
            while self._pending:
                left = None if deadline is None else deadline - time.monotonic()
                if left is not None and left <= 0:
                    break
                self._idle.wait(left)
            return self._pending

    def delivery_error(self, error: object) -> DeliveryError:
        """Send results are ``DeliveryError``s already (see :data:`PERMANENT_RESULTS`)."""
        return delivery_failure(error)

    def close(self) -> None:
        self._client.close()

    def _create(self, topic: str) -> pulsar.Producer:
        chunked = topic in self._chunked
        try:
            producer = self._client.create_producer(
                topic,
                **self._options,
                batching_enabled=not chunked,
                chunking_enabled=chunked,
                block_if_queue_full=False,
                max_pending_messages=self._max_pending + 1,
            )
        except pulsar.PulsarException as exc:
            permanent = isinstance(exc, PERMANENT_EXCEPTIONS)
            raise DeliveryError(f"Pulsar producer for {topic}: {exc}", permanent=permanent) from exc
        self._producers[topic] = producer
        return producer


def _failure(result: pulsar.Result) -> DeliveryError:
    return DeliveryError(f"Pulsar send failed: {result}", permanent=result in PERMANENT_RESULTS)


def _ignore(_err: DeliveryError | None, _msg: Any) -> None:
    return None


def pulsar_producer_factory(settings: PulsarSettings) -> ProducerFactory:
    """Outputs and dead letters of a Pulsar workload, on its own client."""
    return pulsar_target_factory(settings.service_url, settings.client_options)


def pulsar_target_factory(
    service_url: str,
    client_options: Mapping[str, Any],
    producer_options: Mapping[str, Any] | None = None,
    chunked_topics: frozenset[str] = frozenset(),
) -> ProducerFactory:
    """Producers on ``service_url`` (a named cluster's outputs or dead letters); messages to
    ``chunked_topics`` (dead letters) go unbatched, in chunks when over the broker's limit."""

    def build() -> ProducerLike:
        return PulsarProducer(
            service_url,
            client_options,
            producer_options=producer_options,
            chunked_topics=chunked_topics,
        )

    return build
