"""One place per workload in the Dagster UI: the asset ``workloads/<name>`` and its checks.

Why an observable asset per workload: Dagster's catalog already gives an asset a page with its
latest metadata, plots of numeric metadata over time, owners, tags, lineage (the workload reads
its topics) and check badges that turn red, which is what a Kafka UI shows per consumer group.
A run, job or partition page would show one run at a time; the topic's asset mixed the numbers
of every workload reading that topic.

Who writes what on it:

* each consumer run observes it every report (:mod:`orchestration.workloads.reporting`): status,
  rate, lag with a per-partition table (committed, end, lag), in flight, the pinned record,
  failures and dead letters, its replica; a replicated workload gets one observation per replica;
* its checks are judged by the consumer runs from the live replicas' latest reports
  (:mod:`orchestration.workloads.health`, which also defines them);
* the discovery sensor observes it when its phase changes (running, stopped by a person,
  crash-looping, held on an invalid spec, ...) and with each autoscaling decision.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Final

from dagster import AssetKey, AssetSpec

from consumers import WorkloadSpec
from orchestration.workloads.names import topic_asset_key

#: The asset group of every workload's asset.
WORKLOADS_GROUP: Final = "workloads"
#: The checks of every workload, by name: what each holds the workload to.
LAG_CHECK: Final = "lag_below_target"
PINNED_CHECK: Final = "watermark_moving"
DEAD_LETTERS_CHECK: Final = "dead_letters_below_valve"
CHECKS: Final = {
    LAG_CHECK: "records behind the committed positions stay below checks.lag",
    PINNED_CHECK: (
        "no partition's commit position is held by one record, or stalls with records behind "
        "it, longer than checks.pinned"
    ),
    DEAD_LETTERS_CHECK: "dead letters use less than checks.dead_letters of the safety valve",
}


def workload_key(name: str) -> AssetKey:
    return AssetKey(["workloads", name])


def workload_assets(specs: Sequence[WorkloadSpec]) -> list[AssetSpec]:
    """An observable asset per workload, downstream of the topics it reads."""
    assets = []
    for spec in sorted(specs, key=lambda s: s.name):
        kind = spec.source.kind
        topics = ", ".join(spec.source.topics)
        landing = f"; lands into {spec.landing.dataset}" if spec.landing is not None else ""
        assets.append(
            AssetSpec(
                key=workload_key(spec.name),
                deps=[AssetKey(topic_asset_key(t, kind)) for t in spec.source.topics],
                description=f"Workload {spec.name!r}: reads {kind} {topics}{landing}. Its "
                "consumer runs and the discovery sensor observe it: status, rate, lag per "
                "partition, in flight, the pinned record, failures, replicas.",
                group_name=WORKLOADS_GROUP,
                kinds={kind},
                owners=list(spec.owners),
                tags=dict(spec.tags),
                metadata={
                    "workload": spec.name,
                    "topics": topics,
                    "handler": spec.handler or "(lands records as they are)",
                    "check_lag_records": spec.checks.lag,
                    "check_pinned_seconds": spec.checks.pinned,
                    "check_dead_letters_share": spec.checks.dead_letters,
                },
            )
        )
    return assets
