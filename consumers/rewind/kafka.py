"""Rewinding a Kafka consumer group: positions by time, written with the admin client.

Positions come from ``offsets_for_times``, checked against the records on each side of the
answer; where the broker's answer does not hold (Tansu answers 0 for every time) the partition is
read once to find the first record at or after the time. Log ends are found by reading to the
end from the broker's claimed high watermark (wrong on Tansu, see docs/operations.md).

A group with live members is refused: a member would commit its own positions over the new
ones. Under Dagster the rewind job stops the workload's runs first.
"""

from __future__ import annotations

import time
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Any, Final

from confluent_kafka import (
    OFFSET_INVALID,
    Consumer,
    ConsumerGroupState,
    ConsumerGroupTopicPartitions,
    KafkaError,
    KafkaException,
    Message,
    TopicPartition,
)
from confluent_kafka.admin import AdminClient

from consumers.backends.kafka import kafka_identities, producer_properties
from consumers.config.sources import KafkaSourceSpec
from consumers.config.spec import WorkloadSpec
from consumers.landing.files import trim_from
from consumers.rewind.plan import Move, RewindPlan, RewindRefused
from consumers.rewind.target import RewindTarget

__all__ = ["apply_kafka_rewind", "kafka_members", "plan_kafka_rewind"]

_LIVE_STATES: Final = (
    ConsumerGroupState.STABLE,
    ConsumerGroupState.PREPARING_REBALANCING,
    ConsumerGroupState.COMPLETING_REBALANCING,
)
_READ_DEFAULTS: Final[Mapping[str, Any]] = {
    "enable.partition.eof": True,
    "auto.offset.reset": "latest",
    "fetch.wait.max.ms": 10,
    "fetch.queue.backoff.ms": 10,
}

Key = tuple[str, int]


def kafka_members(spec: WorkloadSpec, timeout: float = 10.0) -> list[str]:
    """The group's live members as ``client_id@host``; a group in a live state that lists no
    member (Tansu never lists them) is one entry saying so."""
    admin = AdminClient(producer_properties(spec.client_config()))
    group = _group(spec)
    try:
        description = admin.describe_consumer_groups([group], request_timeout=timeout)[
            group
        ].result()
    except KafkaException as exc:
        if exc.args[0].code() == KafkaError.GROUP_ID_NOT_FOUND:
            return []
        raise RewindRefused(f"cannot describe group {group!r}: {exc.args[0].str()}") from exc
    members = [f"{m.client_id}@{m.host}" for m in description.members]
    if not members and description.state in _LIVE_STATES:
        members = [f"(group is {description.state.name}, the broker lists no members)"]
    return members


def plan_kafka_rewind(
    spec: WorkloadSpec,
    target: RewindTarget,
    partitions: Iterable[int] | None = None,
    timeout: float = 30.0,
) -> RewindPlan:
    """Per partition: the committed position now and where ``target`` puts it. Reads only."""
    reader = _Reader(spec.client_config(), timeout)
    try:
        keys = reader.partitions(spec.source.topics, partitions)
        committed = reader.committed(keys)
        bounds = reader.bounds(keys)
        moves = []
        for key in keys:
            low, end = bounds[key]
            if target.kind == "earliest":
                new = low
            elif target.kind == "latest":
                new = end
            else:
                assert target.at_ms is not None
                new = reader.first_at_or_after(key, target.at_ms, low, end)
            now = committed.get(key)
            again = max(0, now - new) if now is not None else 0
            moves.append(Move(topic=key[0], partition=key[1], committed=now, new=new, again=again))
    finally:
        reader.close()
    return RewindPlan(
        workload=spec.name,
        kind="kafka group",
        group=_group(spec),
        target=target.describe(),
        moves=tuple(moves),
    )


def apply_kafka_rewind(
    spec: WorkloadSpec, plan: RewindPlan, lake: Path | None = None, timeout: float = 30.0
) -> RewindPlan:
    """Refuse while the group has members; write ``plan``'s positions; cut the workload's landed
    files back to them (records from there on land again, each offset once)."""
    members = kafka_members(spec)
    if members:
        raise RewindRefused(
            f"group {plan.group!r} has live members: {', '.join(members)}; stop the workload's "
            "consumers first (under Dagster the rewind job does that)"
        )
    config = spec.client_config()
    admin = AdminClient(producer_properties(config))
    offsets = [TopicPartition(m.topic, m.partition, m.new) for m in plan.moves]
    request = ConsumerGroupTopicPartitions(plan.group, offsets)
    try:
        result = admin.alter_consumer_group_offsets([request], request_timeout=timeout)
        written = result[plan.group].result()
    except KafkaException as exc:
        raise RewindRefused(f"the broker refused the new positions: {exc.args[0].str()}") from exc
    failed = [
        f"{tp.topic}[{tp.partition}]: {tp.error}" for tp in written.topic_partitions if tp.error
    ]
    if failed:
        raise RewindRefused(f"the broker refused some positions: {'; '.join(failed)}")
    moves = list(plan.moves)
    if spec.landing is not None and lake is not None:
        identities = kafka_identities(config)(list(spec.source.topics))
        dataset = spec.landing.dataset
        moves = [
            m.model_copy(
                update={
                    "trimmed_files": trim_from(
                        lake, dataset, identities[m.topic], m.partition, m.new
                    )
                }
            )
            for m in moves
        ]
    return plan.model_copy(update={"applied": True, "moves": tuple(moves)})


def _group(spec: WorkloadSpec) -> str:
    if not isinstance(spec.source, KafkaSourceSpec):
        raise TypeError(f"workload {spec.name!r} reads Pulsar")
    return spec.source.group


class _Reader:
    """A consumer of the workload's group that never subscribes or commits: it only assigns
    partitions to read positions, ends and timestamps."""

    def __init__(self, config: Mapping[str, Any], timeout: float) -> None:
        self._timeout = timeout
        self._consumer = Consumer({**config, **_READ_DEFAULTS})

    def close(self) -> None:
        self._consumer.close()

    def partitions(self, topics: Iterable[str], wanted: Iterable[int] | None) -> list[Key]:
        keys: list[Key] = []
        for topic in topics:
            meta = self._consumer.list_topics(topic, timeout=self._timeout).topics[topic]
            if meta.error is not None:
                raise RewindRefused(f"topic {topic!r}: {meta.error.str()}")
            keys += [(topic, p) for p in sorted(meta.partitions)]
        if wanted is None:
            return keys
        chosen = set(wanted)
        unknown = chosen - {p for _, p in keys}
        if unknown:
            known = ", ".join(str(p) for p in sorted({p for _, p in keys}))
            raise RewindRefused(
                f"no partition {', '.join(map(str, sorted(unknown)))} in "
                f"{', '.join(topics)} (partitions: {known})"
            )
        return [key for key in keys if key[1] in chosen]

    def committed(self, keys: list[Key]) -> dict[Key, int]:
        tps = [TopicPartition(t, p) for t, p in keys]
        found = self._consumer.committed(tps, timeout=self._timeout)
        return {(tp.topic, tp.partition): tp.offset for tp in found if tp.offset != OFFSET_INVALID}

    def bounds(self, keys: list[Key]) -> dict[Key, tuple[int, int]]:
        """(first, end) per partition: the end read to, starting at the broker's claim."""
        lows: dict[Key, int] = {}
        start: list[TopicPartition] = []
        for topic, p in keys:
            low, claimed = self._consumer.get_watermark_offsets(
                TopicPartition(topic, p), timeout=self._timeout
            )
            lows[(topic, p)] = low
            start.append(TopicPartition(topic, p, max(low, claimed)))
        ends = self._read(start, until_end=True)
        return {key: (lows[key], ends[key]) for key in keys}

    def first_at_or_after(self, key: Key, at_ms: int, low: int, end: int) -> int:
        tp = TopicPartition(key[0], key[1], at_ms)
        answer = self._consumer.offsets_for_times([tp], timeout=self._timeout)[0].offset
        answer = end if answer < 0 or answer > end else answer
        if self._holds(key, answer, at_ms, low, end):
            return answer
        found = self._read([TopicPartition(key[0], key[1], low)], until_end=True, at_ms=at_ms)
        return found[key]

    def _holds(self, key: Key, answer: int, at_ms: int, low: int, end: int) -> bool:
        if answer < end and self._timestamp(key, answer) < at_ms:
            return False
        return answer <= low or self._timestamp(key, answer - 1) < at_ms

    def _timestamp(self, key: Key, offset: int) -> int:
        found = self._read([TopicPartition(key[0], key[1], offset)], until_end=False)
        return found[key]

    def _read(
        self, start: list[TopicPartition], until_end: bool, at_ms: int | None = None
    ) -> dict[Key, int]:
        """Read from ``start``: the end of each partition (``until_end``), else the first
        record's timestamp; with ``at_ms``, the offset of the first record at or after it (the
        end when there is none)."""
        self._consumer.assign(start)
        pending = {(tp.topic, tp.partition) for tp in start}
        found: dict[Key, int] = {}
        deadline = time.monotonic() + self._timeout
        try:
            while pending:
                if time.monotonic() > deadline:
                    raise RewindRefused(
                        f"reading {', '.join(f'{t}[{p}]' for t, p in sorted(pending))} took "
                        f"over {self._timeout:.0f} s"
                    )
                for msg in self._consumer.consume(10_000, 0.2):
                    key = (msg.topic(), msg.partition())
                    if key in pending:
                        self._take(msg, key, until_end, at_ms, pending, found)
        finally:
            self._consumer.unassign()
        return found

    @staticmethod
    def _take(
        msg: Message,
        key: Key,
        until_end: bool,
        at_ms: int | None,
        pending: set[Key],
        found: dict[Key, int],
    ) -> None:
        error = msg.error()
        if error is not None:
            if error.code() != KafkaError._PARTITION_EOF:
                raise RewindRefused(f"reading {key[0]}[{key[1]}] failed: {error.str()}")
            found[key] = int(msg.offset())  # type: ignore[arg-type]
            pending.discard(key)
            return
        stamp = msg.timestamp()[1]
        if at_ms is not None:
            if stamp >= at_ms:
                found[key] = int(msg.offset())  # type: ignore[arg-type]
                pending.discard(key)
        elif not until_end:
            found[key] = stamp
            pending.discard(key)
