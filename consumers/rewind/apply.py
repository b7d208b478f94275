"""One entry for a rewind, whatever the broker: the command line and the Dagster job call it."""

from __future__ import annotations

from collections.abc import Iterable
from pathlib import Path

from consumers.config.spec import WorkloadSpec
from consumers.errors import RewindRefused
from consumers.rewind.kafka import apply_kafka_rewind, plan_kafka_rewind
from consumers.rewind.plan import RewindPlan
from consumers.rewind.pulsar import rewind_pulsar
from consumers.rewind.target import RewindTarget

__all__ = ["rewind_workload"]


def rewind_workload(
    spec: WorkloadSpec,
    target: RewindTarget,
    partitions: Iterable[int] | None = None,
    dry_run: bool = False,
    lake: Path | None = None,
) -> RewindPlan:
    """Plan the rewind of ``spec``'s group or subscription and, unless ``dry_run``, apply it.

    ``lake``: where the workload's landed files are, cut back to the new positions (Kafka).
    Raises :class:`RewindRefused` (nothing changed) when the group has live members, a partition
    does not exist or the broker refuses.
    """
    if spec.source.kind == "pulsar":
        if partitions is not None:
            raise RewindRefused(
                f"workload {spec.name!r} reads Pulsar: a subscription is rewound as a whole, "
                "without --partitions"
            )
        return rewind_pulsar(spec, target, dry_run=dry_run)
    plan = plan_kafka_rewind(spec, target, partitions)
    if dry_run:
        return plan
    return apply_kafka_rewind(spec, plan, lake=lake)
