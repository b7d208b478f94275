"""Rewinding a Kafka consumer group: positions by time, written with the admin client.

Positions come from ``offsets_for_times``, checked against the records on each side of the
answer; where the broker's answer does not hold (Tansu answers 0 for every time) the partition is
read once to find the first record at or after the time. Log ends are found by reading to the
end from the broker's claimed high watermark (wrong on Tansu, see docs/operations.md). The
reading is :class:`~consumers.backends.kafka.reader.PartitionReader`'s, which joins no group.

A group with live members is refused: a member would commit its own positions over the new
ones. Under Dagster the rewind job stops the workload's runs first.
"""

from __future__ import annotations

from collections.abc import Collection, Mapping, Sequence
from typing import Any, Final

from confluent_kafka import (
    ConsumerGroupState,
    ConsumerGroupTopicPartitions,
    KafkaError,
    KafkaException,
    TopicPartition,
)
from confluent_kafka.admin import AdminClient

from consumers.backends.admin import PositionChange, StartAt
from consumers.backends.kafka.consumer import kafka_identities, producer_properties
from consumers.backends.kafka.reader import Key, PartitionReader
from consumers.errors import BrokerError, RewindRefused
from consumers.record import SourceIdentity

__all__ = ["KafkaRewinder"]

_LIVE_STATES: Final = (
    ConsumerGroupState.STABLE,
    ConsumerGroupState.PREPARING_REBALANCING,
    ConsumerGroupState.COMPLETING_REBALANCING,
)


class KafkaRewinder:
    """The :class:`~consumers.backends.admin.GroupRewinder` of group ``group`` on ``topics``;
    ``config`` is the workload's librdkafka properties."""

    kind = "kafka group"

    def __init__(
        self, config: Mapping[str, Any], group: str, topics: Sequence[str], timeout: float = 30.0
    ) -> None:
        self.group = group
        self._config = dict(config)
        self._topics = list(topics)
        self._timeout = timeout

    def members(self) -> list[str]:
        """The group's live members as ``client_id@host``; a group in a live state that lists no
        member (Tansu never lists them) is one entry saying so."""
        admin = AdminClient(producer_properties(self._config))
        try:
            described = admin.describe_consumer_groups([self.group], request_timeout=10.0)
            description = described[self.group].result()
        except KafkaException as exc:
            if exc.args[0].code() == KafkaError.GROUP_ID_NOT_FOUND:
                return []
            raise RewindRefused(
                f"cannot describe group {self.group!r}: {exc.args[0].str()}"
            ) from exc
        members = [f"{m.client_id}@{m.host}" for m in description.members]
        if not members and description.state in _LIVE_STATES:
            members = [f"(group is {description.state.name}, the broker lists no members)"]
        return members

    def rewind(
        self, at: StartAt, partitions: Collection[int] | None, *, write: bool
    ) -> list[PositionChange]:
        changes = self._plan(at, partitions)
        if write:
            self._write(changes)
        return changes

    def landed_ids(self) -> Mapping[str, SourceIdentity]:
        return kafka_identities(self._config)(self._topics)

    def _plan(self, at: StartAt, partitions: Collection[int] | None) -> list[PositionChange]:
        reader = PartitionReader(self._config, self._timeout)
        try:
            keys = self._chosen(reader.partitions(self._topics), partitions)
            committed = reader.committed(self.group, keys)
            bounds = reader.bounds(keys)
            changes = []
            for key in keys:
                low, end = bounds[key]
                if at == "earliest":
                    new = low
                elif at == "latest":
                    new = end
                else:
                    new = reader.first_at_or_after(key, at, low, end)
                now = committed.get(key)
                again = max(0, now - new) if now is not None else 0
                changes.append(PositionChange(key[0], key[1], now, new, again))
        except BrokerError as exc:
            raise RewindRefused(str(exc)) from exc
        finally:
            reader.close()
        return changes

    def _write(self, changes: Sequence[PositionChange]) -> None:
        members = self.members()
        if members:
            raise RewindRefused(
                f"group {self.group!r} has live members: {', '.join(members)}; stop the "
                "workload's consumers first (under Dagster the rewind job does that)"
            )
        admin = AdminClient(producer_properties(self._config))
        offsets = [TopicPartition(c.topic, c.partition, c.new) for c in changes]
        request = ConsumerGroupTopicPartitions(self.group, offsets)
        try:
            result = admin.alter_consumer_group_offsets([request], request_timeout=self._timeout)
            written = result[self.group].result()
        except KafkaException as exc:
            raise RewindRefused(
                f"the broker refused the new positions: {exc.args[0].str()}"
            ) from exc
        failed = [
            f"{tp.topic}[{tp.partition}]: {tp.error}" for tp in written.topic_partitions if tp.error
        ]
        if failed:
            raise RewindRefused(f"the broker refused some positions: {'; '.join(failed)}")

    def _chosen(self, keys: list[Key], wanted: Collection[int] | None) -> list[Key]:
        """The partitions of ``keys`` numbered in ``wanted`` (all when None); unknown numbers
        are refused."""
        if wanted is None:
            return keys
        chosen = set(wanted)
        unknown = chosen - {p for _, p in keys}
        if unknown:
            known = ", ".join(str(p) for p in sorted({p for _, p in keys}))
            raise RewindRefused(
                f"no partition {', '.join(map(str, sorted(unknown)))} in "
                f"{', '.join(self._topics)} (partitions: {known})"
            )
        return [key for key in keys if key[1] in chosen]
