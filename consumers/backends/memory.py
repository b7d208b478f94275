"""An in-memory broker with the Kafka offset contract, for fast tests of engine logic.

It keeps the broker contract (:class:`consumers.backends.base.ConsumerLike`): subscribe with
rebalance callbacks, batched ``consume``, pause/resume, commits *with metadata* (which Tansu
drops), ``committed``, the end of each partition.
Groups rebalance eagerly: every member revokes before anyone gets the new assignment, like
Kafka's range assignor. It is thread-safe: one lock, one condition for waiting consumers.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from typing import Any

import xxhash

from consumers.backends.base import (
    NO_OFFSET,
    CommitOffset,
    CommitResult,
    PartitionKey,
    PlainMessage,
    Rebalance,
    delivery_failure,
)
from consumers.errors import BrokerError, DeliveryError


@dataclass
class _Entry:
    key: bytes | None
    value: bytes | None
    headers: list[tuple[str, bytes]] | None
    timestamp: int


def _message(topic: str, partition: int, offset: int, entry: _Entry) -> PlainMessage:
    return PlainMessage(
        topic, partition, offset, entry.key, entry.value, entry.headers, entry.timestamp
    )


@dataclass
class _Group:
    generation: int = 0
    members: list[MemoryConsumer] = field(default_factory=list)
    committed: dict[tuple[str, int], tuple[int, str]] = field(default_factory=dict)
    assigned_generation: int = -1


class MemoryBroker:
    """Topics as lists of entries per partition, groups with committed offsets."""

    def __init__(self) -> None:
        self._lock = threading.Condition()
        self._topics: dict[str, list[list[_Entry]]] = {}
        self._groups: dict[str, _Group] = {}
        self._round_robin = 0
        #: Producing to these topics fails (to test failed writes).
        self.unavailable: set[str] = set()
        #: Each partition's earliest offset still held (retention: :meth:`delete_before`).
        self._earliest: dict[tuple[str, int], int] = {}
        #: A record larger than this (key, value and headers) fails for good on the topic, as
        #: one over a Kafka topic's ``max.message.bytes`` does.
        self.max_message_bytes: dict[str, int] = {}

    def create_topic(self, topic: str, partitions: int = 1) -> None:
        with self._lock:
            self._topics.setdefault(topic, [[] for _ in range(partitions)])

    def produce(
        self,
        topic: str,
        value: bytes | None,
        key: bytes | None = None,
        partition: int | None = None,
        headers: list[tuple[str, bytes]] | None = None,
        offset_gap: int = 0,
    ) -> tuple[int, int]:
        """Append a record; ``offset_gap`` leaves holes as compaction or markers would."""
        with self._lock:
            logs = self._topics[topic]
            if partition is None:
                if key is None:
                    self._round_robin += 1
                    partition = self._round_robin % len(logs)
                else:
                    partition = xxhash.xxh32_intdigest(key) % len(logs)
            log = logs[partition]
            for _ in range(offset_gap):
                log.append(_Entry(None, None, None, -1))  # a hole: never delivered
            log.append(_Entry(key, value, headers, int(time.time() * 1000)))
            self._lock.notify_all()
            return partition, len(log) - 1

    def mark(self, topic: str, partition: int, count: int = 1) -> None:
        """Append offsets no consumer is ever given, as a transaction's commit or abort marker
        does at the end of a partition."""
        with self._lock:
            self._topics[topic][partition].extend(
                _Entry(None, None, None, -1) for _ in range(count)
            )
            self._lock.notify_all()

    def delete_before(self, topic: str, partition: int, offset: int) -> None:
        """Forget a partition's records below ``offset``, as retention does."""
        with self._lock:
            self._earliest[(topic, partition)] = offset

    def end_offsets(self, topic: str) -> list[int]:
        with self._lock:
            return [len(log) for log in self._topics[topic]]

    def committed_offsets(self, group: str, topic: str) -> list[int | None]:
        with self._lock:
            g = self._groups.get(group, _Group())
            return [
                g.committed.get((topic, p), (None, ""))[0] for p in range(len(self._topics[topic]))
            ]

    def members(self, group: str) -> int:
        with self._lock:  # the open consumers of ``group``
            return len(self._groups.get(group, _Group()).members)

    def alter_offsets(self, group: str, offsets: Iterable[tuple[str, int, int]]) -> None:
        """Write ``group``'s committed ``(topic, partition, offset)``, as an admin client does."""
        with self._lock:
            self._group(group).committed.update({(t, p): (o, "") for t, p, o in offsets})

    def earliest(self, topic: str, partition: int) -> int:
        with self._lock:  # the partition's earliest offset still held
            return self._earliest.get((topic, partition), 0)

    def producer(self) -> MemoryProducer:
        return MemoryProducer(self)

    def read(self, topic: str) -> list[list[PlainMessage]]:
        """Every record of ``topic``, per partition (for assertions)."""
        with self._lock:
            return [
                [_message(topic, p, o, e) for o, e in enumerate(log) if e.timestamp != -1]
                for p, log in enumerate(self._topics[topic])
            ]

    def consumer(self, group: str, on_commit: CommitResult | None = None) -> MemoryConsumer:
        return MemoryConsumer(self, group, on_commit)

    # --------------------------------------------------------------- group internals

    def _group(self, name: str) -> _Group:
        return self._groups.setdefault(name, _Group())

    def _rebalance(self, group: _Group) -> None:
        group.generation += 1
        self._lock.notify_all()


class MemoryConsumer:
    """One group member; see the module docstring for what it models."""

    def __init__(
        self,
        broker: MemoryBroker,
        group: str,
        on_commit: CommitResult | None,
    ) -> None:
        self._broker = broker
        self._group_name = group
        self._on_commit = on_commit
        self._topics: list[str] = []
        self._callbacks: dict[str, Rebalance] = {}
        self._generation = -1
        self._assignment: list[tuple[str, int]] | None = None
        self._positions: dict[tuple[str, int], int] = {}
        self._paused: set[tuple[str, int]] = set()
        self._pending_commit_callbacks = 0
        self._closed = False

    def subscribe(
        self,
        topics: list[str],
        *,
        on_assign: Rebalance | None = None,
        on_revoke: Rebalance | None = None,
        on_lost: Rebalance | None = None,
    ) -> None:
        """Join the group; callbacks left out are not called (tests)."""
        b = self._broker
        with b._lock:
            self._topics = list(topics)
            given = {"on_assign": on_assign, "on_revoke": on_revoke, "on_lost": on_lost}
            self._callbacks = {name: call for name, call in given.items() if call is not None}
            group = b._group(self._group_name)
            group.members.append(self)
            b._rebalance(group)

    def consume(self, num_messages: int = 1, timeout: float = -1) -> list[PlainMessage]:
        self._check_open()
        for _ in range(self._take_commit_callbacks()):
            if self._on_commit is not None:
                self._on_commit(None)
        self._maybe_rebalance()
        b = self._broker
        deadline = time.monotonic() + (timeout if timeout >= 0 else 3600)
        with b._lock:
            while True:
                out = self._fetch(num_messages)
                group = b._group(self._group_name)
                if out or self._generation != group.generation:
                    return out
                remaining = deadline - time.monotonic()
                if remaining <= 0:
                    return []
                b._lock.wait(remaining)

    def _fetch(self, limit: int) -> list[PlainMessage]:
        out: list[PlainMessage] = []
        for tp in self._assignment or []:
            if tp in self._paused:
                continue
            log = self._broker._topics[tp[0]][tp[1]]
            pos = max(self._positions[tp], self._broker._earliest.get(tp, 0))
            while pos < len(log) and len(out) < limit:
                entry = log[pos]
                if entry.timestamp != -1:
                    out.append(_message(tp[0], tp[1], pos, entry))
                pos += 1
            self._positions[tp] = pos
        return out

    def _maybe_rebalance(self) -> None:
        b = self._broker
        with b._lock:
            group = b._group(self._group_name)
            stale = self._generation != group.generation
            revoked = self._assignment if stale else None
            if stale:
                self._assignment = None
                self._generation = group.generation
        if revoked:
            self._call("on_revoke", revoked)
        with b._lock:
            group = b._group(self._group_name)
            if self._assignment is not None or self._generation != group.generation:
                return
            if any(m._generation != group.generation for m in group.members):
                return  # wait until every member has revoked
            mine = self._range_assignment(group)
            self._assignment = mine
            # Like librdkafka, paused flags outlive a revoke and the next assignment.
            for tp in mine:
                self._positions[tp] = max(group.committed.get(tp, (0, ""))[0], 0)
        self._call("on_assign", mine)
        with b._lock:  # like Kafka: read from the position committed when on_assign returns
            for tp in mine:
                self._positions[tp] = max(group.committed.get(tp, (0, ""))[0], 0)

    def _range_assignment(self, group: _Group) -> list[tuple[str, int]]:
        members = group.members
        index = members.index(self)
        mine = []
        for topic in sorted(self._topics):
            count = len(self._broker._topics[topic])
            per, extra = divmod(count, len(members))
            start = index * per + min(index, extra)
            mine += [(topic, p) for p in range(start, start + per + (1 if index < extra else 0))]
        return mine

    def _call(self, name: str, parts: list[tuple[str, int]]) -> None:
        callback = self._callbacks.get(name)
        if callback is not None:
            callback(list(parts))

    def commit(self, offsets: list[CommitOffset], asynchronous: bool = True) -> None:
        """Like a group coordinator: a position for a partition this member does not own is
        refused (a stale generation), and nothing of the request is stored."""
        self._check_open()
        b = self._broker
        with b._lock:
            group = b._group(self._group_name)
            owned = set(self._assignment or [])
            for topic, partition, _, _ in offsets:
                if (topic, partition) not in owned:
                    raise BrokerError(f"illegal generation: {topic}[{partition}] is not assigned")
            for topic, partition, offset, metadata in offsets:
                group.committed[(topic, partition)] = (offset, metadata)
            if asynchronous:
                self._pending_commit_callbacks += 1

    def committed(self, parts: list[PartitionKey], timeout: float = -1) -> list[CommitOffset]:
        with self._broker._lock:
            group = self._broker._group(self._group_name)
            return [(t, p, *group.committed.get((t, p), (NO_OFFSET, ""))) for t, p in parts]

    def pause(self, parts: list[PartitionKey]) -> None:
        with self._broker._lock:
            self._paused.update(parts)

    def resume(self, parts: list[PartitionKey]) -> None:
        with self._broker._lock:
            self._paused.difference_update(parts)
            self._broker._lock.notify_all()

    def seek(self, part: PartitionKey, offset: int) -> None:
        with self._broker._lock:
            if part not in (self._assignment or []):
                raise BrokerError(f"seek of {part[0]}[{part[1]}]: not assigned")
            self._positions[part] = offset
            self._broker._lock.notify_all()

    def assignment(self) -> list[PartitionKey]:
        """This member's partitions (for tests; the engine learns them from callbacks)."""
        return list(self._assignment or [])

    def high_watermark(self, part: PartitionKey) -> int:
        with self._broker._lock:
            return len(self._broker._topics[part[0]][part[1]])

    def low_watermark(self, part: PartitionKey) -> int:
        with self._broker._lock:
            return self._broker._earliest.get(part, 0)

    def positions(self, parts: list[PartitionKey]) -> dict[PartitionKey, int]:
        with self._broker._lock:
            return {part: self._positions[part] for part in parts if part in self._positions}

    def close(self) -> None:
        if self._closed:
            return
        if self._assignment:
            self._call("on_revoke", self._assignment)
        b = self._broker
        with b._lock:
            group = b._group(self._group_name)
            group.members.remove(self)
            self._closed = True
            b._rebalance(group)

    def _take_commit_callbacks(self) -> int:
        with self._broker._lock:
            pending, self._pending_commit_callbacks = self._pending_commit_callbacks, 0
            return pending

    def _check_open(self) -> None:
        if self._closed:
            raise RuntimeError("Consumer closed")


class MemoryProducer:
    """Looks like ``confluent_kafka.Producer``: delivery callbacks run inside ``poll``/``flush``."""

    def __init__(self, broker: MemoryBroker) -> None:
        self._broker = broker
        self._lock = threading.Lock()
        self._callbacks: list[tuple[Callable[[Any, Any], None], object]] = []

    def produce(
        self,
        topic: str,
        value: bytes | None = None,
        key: bytes | None = None,
        headers: list[tuple[str, bytes]] | None = None,
        on_delivery: Callable[[Any, Any], None] | None = None,
        **_: Any,
    ) -> None:
        error: object = None
        limit = self._broker.max_message_bytes.get(topic)
        size = len(key or b"") + len(value or b"") + sum(len(k) + len(v) for k, v in headers or ())
        if limit is not None and size > limit:
            error = DeliveryError(f"{size} bytes, over {topic}'s {limit}", permanent=True)
        elif topic in self._broker.unavailable or topic not in self._broker._topics:
            error = f"topic {topic} unavailable"
        else:
            self._broker.produce(topic, value, key, headers=headers)
        if on_delivery is not None:
            with self._lock:
                self._callbacks.append((on_delivery, error))

    def poll(self, timeout: float = -1) -> int:
        with self._lock:
            callbacks, self._callbacks = self._callbacks, []
        for callback, error in callbacks:
            callback(error, None)
        if not callbacks and timeout > 0:
            time.sleep(min(timeout, 0.005))
        return len(callbacks)

    def flush(self, timeout: float = -1) -> int:
        self.poll(0)
        return 0

    def delivery_error(self, error: object) -> DeliveryError:
        """Over a topic's ``max_message_bytes``: permanent; an unavailable topic: transient."""
        return delivery_failure(error)

    def close(self) -> None:
        """Nothing to release: deliveries are served by :meth:`poll`."""
