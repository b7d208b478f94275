"""How far a workload's consumer group is behind, read from the broker (never from its runs).

Per partition: the group's committed offset (none: where ``auto.offset.reset`` starts a new
member), the log end, the records in between, and the age of the oldest of them, the first
record at the committed offset: ``now`` minus its timestamp. The age is what autoscaling
targets (:mod:`consumers.scaling.policy`): unlike a record count it means the same at ten records
a second and at ten thousand.

The reading (:class:`~consumers.backends.kafka.reader.PartitionReader`) joins no group and
commits nothing, so measuring never disturbs the workload's members; it reads one record per
partition. On Tansu the log end comes from the fetch response's high watermark, as the broker's
watermark queries are wrong there. One ``timeout`` bounds the whole measurement; past it, or on
any broker failure, :class:`LagUnavailable`.

Timestamps are the records' own (CreateTime unless the topic uses LogAppendTime): a producer
that stamps records with old event times makes them look old here too.
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from typing import Final

from confluent_kafka import OFFSET_BEGINNING

from consumers.backends.kafka.consumer import CONSUMER_DEFAULTS
from consumers.backends.kafka.reader import Head, Key, PartitionReader
from consumers.config.sources import KafkaSourceSpec
from consumers.config.spec import WorkloadSpec
from consumers.errors import BrokerError, LagUnavailable

__all__ = ["Lag", "LagUnavailable", "PartitionLag", "measure_lag"]

#: ``auto.offset.reset`` values that start a group without commits at the log end.
_STARTS_AT_END: Final = frozenset({"latest", "largest", "end"})


@dataclass(frozen=True)
class PartitionLag:
    """One partition of a source topic."""

    topic: str
    partition: int
    #: The group's committed offset; None when it has none.
    committed: int | None
    #: The log end (the next offset to be written).
    end: int
    #: Records between the group's position and the end.
    behind: int
    #: Seconds since the oldest of them was stamped; None when nothing is behind or it is unknown.
    oldest_age: float | None


@dataclass(frozen=True)
class Lag:
    """A workload's lag over all partitions of its source topics."""

    #: Records behind, summed over partitions.
    records: int
    #: Age (s) of the oldest unconsumed record over all partitions; 0.0 when nothing is behind.
    oldest_age: float
    #: Partitions of the source topics: more replicas than this would sit idle.
    partitions: int
    by_partition: tuple[PartitionLag, ...]


def measure_lag(spec: WorkloadSpec, *, now: float | None = None, timeout: float = 5.0) -> Lag:
    """``spec``'s lag now (``now``: seconds since the epoch, default the wall clock after
    reading), read from the broker within ``timeout`` seconds in all."""
    source = spec.source
    if not isinstance(source, KafkaSourceSpec):
        raise LagUnavailable(
            spec.name,
            "a Pulsar subscription's lag needs the broker's admin API (its backlog and the "
            "publish time of its oldest message), which Lanehouse does not read yet and "
            "pulsar-lite does not serve (so a Pulsar workload takes a fixed replica count)",
        )
    config = spec.client_config()
    reset = str(config.get("auto.offset.reset", CONSUMER_DEFAULTS["auto.offset.reset"]))
    at_end = reset.lower() in _STARTS_AT_END
    try:
        reader = PartitionReader(config, timeout, deadline=time.monotonic() + timeout)
        try:
            keys = reader.partitions(source.topics)
            committed = reader.committed(source.group, keys)
            heads = reader.heads({key: committed.get(key, OFFSET_BEGINNING) for key in keys})
        finally:
            reader.close()
    except BrokerError as exc:
        raise LagUnavailable(spec.name, str(exc)) from exc
    moment = time.time() if now is None else now
    parts = tuple(_partition(key, committed.get(key), heads[key], at_end, moment) for key in keys)
    ages = [p.oldest_age for p in parts if p.oldest_age is not None]
    return Lag(
        records=sum(p.behind for p in parts),
        oldest_age=max(ages, default=0.0),
        partitions=len(keys),
        by_partition=parts,
    )


def _partition(
    key: Key, committed: int | None, head: Head, at_end: bool, now: float
) -> PartitionLag:
    """Without a commit, a new member starts at the first record (earliest) or at the end."""
    start = head.end if at_end else head.offset
    position = committed if committed is not None else start
    behind = max(0, head.end - position)
    age = None
    if behind and head.timestamp_ms is not None and head.offset < head.end:
        age = max(0.0, now - head.timestamp_ms / 1000)
    return PartitionLag(
        topic=key[0],
        partition=key[1],
        committed=committed,
        end=head.end,
        behind=behind,
        oldest_age=age,
    )
