"""Rewinding a Kafka consumer group: positions by time, written with the admin client.

Positions come from ``offsets_for_times``, checked against the records on each side of the
answer; where the broker's answer does not hold (Tansu answers 0 for every time) the partition is
read once to find the first record at or after the time. Log ends are found by reading to the
end from the broker's claimed high watermark (wrong on Tansu, see docs/operations.md). The
reading is :class:`consumers.backends.kafka.reader.PartitionReader`'s, which joins no group.

A group with live members is refused: a member would commit its own positions over the new
ones. Under Dagster the rewind job stops the workload's runs first.
"""

from __future__ import annotations

from collections.abc import Iterable
from pathlib import Path
from typing import Final

from confluent_kafka import (
    ConsumerGroupState,
    ConsumerGroupTopicPartitions,
    KafkaError,
    KafkaException,
    TopicPartition,
)
from confluent_kafka.admin import AdminClient

from consumers.backends.kafka.consumer import kafka_identities, producer_properties
from consumers.backends.kafka.reader import Key, PartitionReader
from consumers.config.sources import KafkaSourceSpec
from consumers.config.spec import WorkloadSpec
from consumers.errors import BrokerError, RewindRefused
from consumers.landing.files import trim_from
from consumers.rewind.plan import Move, RewindPlan
from consumers.rewind.target import RewindTarget

__all__ = ["apply_kafka_rewind", "kafka_members", "plan_kafka_rewind"]

_LIVE_STATES: Final = (
    ConsumerGroupState.STABLE,
    ConsumerGroupState.PREPARING_REBALANCING,
    ConsumerGroupState.COMPLETING_REBALANCING,
)


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
    reader = PartitionReader(spec.client_config(), timeout)
    try:
        keys = _chosen(reader.partitions(spec.source.topics), partitions, spec.source.topics)
        committed = reader.committed(_group(spec), keys)
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
    except BrokerError as exc:
        raise RewindRefused(str(exc)) from exc
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


def _chosen(keys: list[Key], wanted: Iterable[int] | None, topics: Iterable[str]) -> list[Key]:
    """The partitions of ``keys`` numbered in ``wanted`` (all when None); unknown numbers are
    refused."""
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
