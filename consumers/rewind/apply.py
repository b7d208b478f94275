"""One entry for a rewind, whatever the broker: the command line and the Dagster job call it.

The broker's room moves the group (:class:`~consumers.backends.admin.GroupRewinder`); this
module builds the plan's record from its answer and cuts the workload's landed files back to the
new positions, so records from there on land again, each offset once.
"""

from __future__ import annotations

from collections.abc import Collection
from dataclasses import asdict
from pathlib import Path

from consumers.backends.admin import GroupRewinder
from consumers.backends.kafka.rewind import KafkaRewinder
from consumers.backends.pulsar.rewind import PulsarRewinder
from consumers.config.sources import KafkaSourceSpec
from consumers.config.spec import WorkloadSpec
from consumers.landing.files import trim_from
from consumers.rewind.plan import Move, RewindPlan
from consumers.rewind.target import RewindTarget

__all__ = ["rewind_workload", "rewinder_for"]


def rewinder_for(spec: WorkloadSpec) -> GroupRewinder:
    """The broker's rewinder of ``spec``'s consumer group or subscription."""
    source = spec.source
    if isinstance(source, KafkaSourceSpec):
        return KafkaRewinder(spec.client_config(), source.group, source.topics)
    return PulsarRewinder(
        source.service_url,
        source.client_options(),
        source.subscription,
        source.subscription_type,
        source.topics,
    )


def rewind_workload(
    spec: WorkloadSpec,
    target: RewindTarget,
    partitions: Collection[int] | None = None,
    dry_run: bool = False,
    lake: Path | None = None,
    rewinder: GroupRewinder | None = None,
) -> RewindPlan:
    """Plan the rewind of ``spec``'s group or subscription and, unless ``dry_run``, apply it.

    ``lake``: where the workload's landed files are, cut back to the new positions (where
    positions are offsets: Kafka). ``rewinder``: the broker's, by default :func:`rewinder_for`.
    Raises :class:`~consumers.errors.RewindRefused` (nothing changed) when the group has live
    members, a partition does not exist or the broker refuses.
    """
    group = rewinder or rewinder_for(spec)
    changes = group.rewind(target.start_at(), partitions, write=not dry_run)
    moves = [Move(**asdict(change)) for change in changes]
    landed = group.landed_ids() if not dry_run and lake is not None else None
    if landed is not None and lake is not None and spec.landing is not None:
        dataset = spec.landing.dataset
        cut = [trim_from(lake, dataset, landed[m.topic], m.partition, m.new) for m in moves]
        moves = [m.model_copy(update={"trimmed_files": n}) for m, n in zip(moves, cut, strict=True)]
    return RewindPlan(
        workload=spec.name,
        kind=group.kind,
        group=group.group,
        target=target.describe(),
        moves=tuple(moves),
        applied=not dry_run,
    )
