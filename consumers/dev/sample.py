"""Sample data for demos, tests and benchmarks: keyed JSON records with per-key sequence numbers.

Every value is ``{"key": "k7", "seq": 12, "ts": <epoch ms>, "pad": "xx..."}``; the record key is
the key string in UTF-8 (``k`` is the default key prefix). ``seq`` counts from 0 per key, so a
consumer can check per-key order and completeness: for every key the values it sees must be 0, 1,
2, ... with no gap or repeat. :func:`produce_sample` writes them to Kafka,
:func:`produce_pulsar_sample` the very same records to Pulsar.

Keys are drawn round-robin in a random order per round (seeded, so reruns are identical): every
key gets ``count // keys`` or one more record, interleaved differently each round.
"""

from __future__ import annotations

import random
import threading
import time
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass
from itertools import islice
from types import MappingProxyType
from typing import Any, Final

from confluent_kafka import KafkaError, Message, Producer

from consumers.config.names import validate_topic_name
from consumers.config.pulsar_options import validate_pulsar_topic
from consumers.dev.embedded.tansu import create_topic
from consumers.errors import BrokerError

__all__ = ["PRODUCER_CONFIG", "ProduceSummary", "produce_pulsar_sample", "produce_sample"]

#: Throughput-oriented, idempotent producer settings (idempotence keeps per-key order on retry).
PRODUCER_CONFIG: Final[Mapping[str, str | int | bool]] = MappingProxyType(
    {
        "linger.ms": 5,
        "batch.num.messages": 10_000,
        "enable.idempotence": True,
        "queue.buffering.max.messages": 1_000_000,
    }
)

_VALUE = b'{"key":"%s","seq":%d,"ts":%d,"pad":"%s"}'
_UNPACED_CHUNK: Final = 10_000  # records between progress reports / delivery polls
_BUFFER_FULL_WAIT: Final = 0.05  # seconds to serve deliveries when the local queue is full


@dataclass(frozen=True)
class ProduceSummary:
    """What :func:`produce_sample` wrote: all ``records`` acknowledged by the broker."""

    topic: str
    records: int
    keys: int
    seconds: float

    @property
    def per_second(self) -> float:
        return self.records / self.seconds if self.seconds > 0 else float("inf")


class TokenBucket:
    """Allows ``rate`` tokens per second with bursts up to ``burst``; blocks in :meth:`acquire`.

    Reads an injectable monotonic ``clock`` and ``sleep`` so tests can drive it by hand.
    """

    def __init__(
        self,
        rate: float,
        burst: float,
        clock: Callable[[], float] = time.monotonic,
        sleep: Callable[[float], None] = time.sleep,
    ) -> None:
        if rate <= 0:
            raise ValueError(f"rate must be positive, got {rate}")
        if burst < 1:
            raise ValueError(f"burst must be at least 1, got {burst}")
        self.rate = rate
        self.burst = burst
        self._clock = clock
        self._sleep = sleep
        self._tokens = burst
        self._last = clock()

    def acquire(self, n: int = 1) -> None:
        """Take ``n`` tokens, sleeping once for any shortfall (which later refills repay)."""
        now = self._clock()
        self._tokens = min(self.burst, self._tokens + (now - self._last) * self.rate)
        self._last = now
        self._tokens -= n
        if self._tokens < 0:
            self._sleep(-self._tokens / self.rate)


def produce_sample(
    bootstrap: str,
    topic: str,
    count: int,
    keys: int,
    rate: float | None = None,
    partitions: int | None = None,
    progress: Callable[[int], None] | None = None,
    value_size: int = 0,
    *,
    seed: int | None = 0,
    key_prefix: str = "k",
    config: Mapping[str, str | int | bool] | None = None,
    flush_timeout: float = 60.0,
) -> ProduceSummary:
    """Write ``count`` records over ``keys`` keys to Kafka ``topic`` and wait until all are acked.

    ``rate`` caps records per second (token bucket); ``partitions`` creates the topic first
    (an existing topic is kept as is); ``progress`` is called with the number of records handed
    to the client so far, every few thousand records and at the end; ``value_size`` pads each
    value to at least that many bytes; keys are ``{key_prefix}0``, ``{key_prefix}1``, ...
    ``config`` overrides :data:`PRODUCER_CONFIG`. Raises :class:`BrokerError` when any delivery
    fails or the flush does not finish in time.
    """
    validate_topic_name(topic)
    _check_arguments(count, keys, rate, value_size)
    if partitions is not None:
        create_topic(bootstrap, topic, partitions, exist_ok=True)

    failures: list[KafkaError] = []

    def on_delivery(err: KafkaError | None, _msg: Message) -> None:
        if err is not None:
            failures.append(err)

    producer = Producer(
        {
            **PRODUCER_CONFIG,
            **(config or {}),
            "bootstrap.servers": bootstrap,
            "on_delivery": on_delivery,
        }
    )
    produce, poll = producer.produce, producer.poll
    start = time.monotonic()
    done = 0
    for n, chunk in _sample_chunks(count, keys, rate, value_size, seed, key_prefix):
        for name, value in chunk:
            try:
                produce(topic, value, name)
            except BufferError:
                _produce_when_room(producer, topic, value, name)
        done += n
        poll(0)
        if failures:
            break
        if progress is not None:
            progress(done)

    remaining = producer.flush(flush_timeout)
    seconds = time.monotonic() - start
    if failures:
        raise BrokerError(
            f"{len(failures)} deliveries to {topic!r} on {bootstrap} failed; first: {failures[0]}",
            topic=topic,
        )
    if remaining:
        raise BrokerError(
            f"{remaining} records to {topic!r} on {bootstrap} still unacknowledged "
            f"after {flush_timeout:.0f} s",
            topic=topic,
            retriable=True,
        )
    return ProduceSummary(topic=topic, records=count, keys=keys, seconds=seconds)


def produce_pulsar_sample(
    service_url: str,
    topic: str,
    count: int,
    keys: int,
    rate: float | None = None,
    progress: Callable[[int], None] | None = None,
    value_size: int = 0,
    *,
    seed: int | None = 0,
    key_prefix: str = "k",
    client_options: Mapping[str, Any] | None = None,
    send_timeout: float = 30.0,
) -> ProduceSummary:
    """The records of :func:`produce_sample`, written to Pulsar ``topic`` (short or full name).

    The record key becomes the message's partition key (what the engine reads as the key).
    Sends block while the client's queue is full instead of failing, and every send's callback
    is checked: returns once all ``count`` are acknowledged, else raises :class:`BrokerError`
    (a send unacknowledged after ``send_timeout`` s fails). ``client_options`` are
    ``pulsar.Client`` keyword options as in a spec's ``source.config``. The summary names the
    topic by its full name.
    """
    full = validate_pulsar_topic(topic)
    _check_arguments(count, keys, rate, value_size)
    # Imported here: `lanehouse produce` to Kafka should not pay for loading pulsar-client.
    import pulsar

    from consumers.backends.pulsar.client import client_kwargs

    acks = _Acks(pulsar.Result.Ok)
    start = time.monotonic()
    try:
        client = pulsar.Client(service_url, **client_kwargs(client_options or {}))
    except (pulsar.PulsarException, ValueError) as exc:
        raise BrokerError(f"cannot connect to Pulsar at {service_url}: {exc}") from exc
    try:
        try:
            producer = client.create_producer(
                full,
                send_timeout_millis=max(1, int(send_timeout * 1000)),
                block_if_queue_full=True,  # else a full queue fails sends in their callbacks
                batching_enabled=True,
                batching_max_publish_delay_ms=5,
                max_pending_messages=10_000,
            )
        except pulsar.PulsarException as exc:
            raise BrokerError(
                f"cannot write to {full!r} on {service_url}: {exc}", topic=full
            ) from exc
        send, sent = producer.send_async, acks.callback
        done = 0
        for n, chunk in _sample_chunks(count, keys, rate, value_size, seed, key_prefix):
            for name, value in chunk:
                send(value, sent, partition_key=name.decode())
            done += n
            if acks.failures:
                break
            if progress is not None:
                progress(done)
        producer.flush()
        acks.wait(done, send_timeout)
    except pulsar.PulsarException as exc:
        raise BrokerError(
            f"writing to {full!r} on {service_url} failed: {exc}", topic=full
        ) from exc
    finally:
        client.close()
    seconds = time.monotonic() - start
    if acks.failures:
        raise BrokerError(
            f"{len(acks.failures)} sends to {full!r} on {service_url} failed; "
            f"first: {acks.failures[0]}",
            topic=full,
        )
    if acks.ok < count:
        raise BrokerError(
            f"{count - acks.ok} records to {full!r} on {service_url} still unacknowledged "
            f"after {send_timeout:.0f} s",
            topic=full,
            retriable=True,
        )
    return ProduceSummary(topic=full, records=count, keys=keys, seconds=seconds)


class _Acks:
    """Counts the send callbacks of a Pulsar producer (they run on the client's threads)."""

    def __init__(self, ok: Any) -> None:
        self._ok_result = ok  # pulsar.Result.Ok
        self.ok = 0
        self.failures: list[str] = []
        self._done = threading.Condition()

    def callback(self, result: Any, _message_id: Any) -> None:
        with self._done:
            if result == self._ok_result:
                self.ok += 1
            else:
                self.failures.append(str(result))
            self._done.notify_all()

    def wait(self, sent: int, timeout: float) -> None:
        """Until ``sent`` callbacks came (flush returning does not promise they ran)."""
        with self._done:
            self._done.wait_for(lambda: self.ok + len(self.failures) >= sent, timeout)


def _check_arguments(count: int, keys: int, rate: float | None, value_size: int) -> None:
    if count < 0:
        raise ValueError(f"count must be >= 0, got {count}")
    if keys < 1:
        raise ValueError(f"keys must be >= 1, got {keys}")
    if value_size < 0:
        raise ValueError(f"value_size must be >= 0, got {value_size}")
    if rate is not None and rate <= 0:
        raise ValueError(f"rate must be positive, got {rate}")


def _sample_chunks(
    count: int,
    keys: int,
    rate: float | None,
    value_size: int,
    seed: int | None,
    key_prefix: str,
) -> Iterator[tuple[int, Iterator[tuple[bytes, bytes]]]]:
    """``(size, records)`` chunks of ``(key, value)`` records, each released when ``rate``
    allows it.

    Chunks are the points where producers serve deliveries and report progress: large when
    unpaced, about 1/100 s of records when paced. Records are made as they are consumed
    (one at a time, so each value is freed right after it is handed to the client).
    """
    records = _sample_records(keys, value_size, seed, key_prefix)
    size = _UNPACED_CHUNK if rate is None else max(1, min(1000, int(rate // 100)))
    bucket = None if rate is None else TokenBucket(rate, burst=size)
    done = 0
    while done < count:
        n = min(size, count - done)
        if bucket is not None:
            bucket.acquire(n)
        done += n
        yield n, islice(records, n)


def _sample_records(
    keys: int, value_size: int, seed: int | None, key_prefix: str
) -> Iterator[tuple[bytes, bytes]]:
    """Endless ``(key, value)`` sample records: per-key sequence numbers, seeded key order."""
    names = [f"{key_prefix}{i}".encode() for i in range(keys)]
    seqs = [0] * keys
    for k in _key_order(keys, random.Random(seed)):
        seq = seqs[k]
        seqs[k] = seq + 1
        name = names[k]
        value = _VALUE % (name, seq, time.time_ns() // 1_000_000, b"")
        if len(value) < value_size:
            pad = b"x" * (value_size - len(value))
            value = _VALUE % (name, seq, time.time_ns() // 1_000_000, pad)
        yield name, value


def _key_order(keys: int, rng: random.Random) -> Iterator[int]:
    """Endless key indexes: each round is every key once, in a fresh random order."""
    order = list(range(keys))
    while True:
        rng.shuffle(order)
        yield from order


def _produce_when_room(producer: Producer, topic: str, value: bytes, key: bytes) -> None:
    """The local queue is full: serve deliveries until the record fits."""
    while True:
        producer.poll(_BUFFER_FULL_WAIT)
        try:
            producer.produce(topic, value, key)
        except BufferError:
            continue
        return
