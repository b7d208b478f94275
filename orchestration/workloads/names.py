"""Names shared by the consumer job, the discovery sensor and the CLI: the ``workloads``
partitions' name, run tags, and where workload specs live.

One module so the sensor can target the job by name and tag runs the way the job and
``lanehouse workloads`` read them, without importing each other. It does not import Dagster (the
CLI and ``lanehouse up`` use it); the partitions definition itself is in
:mod:`orchestration.workloads.partitions`.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from pathlib import Path
from typing import Final, Literal

from consumers.config.pulsar_options import validate_pulsar_topic
from orchestration import settings

SourceKind = Literal["kafka", "pulsar"]

#: One dynamic partition per workload name: the UI shows one row per workload.
WORKLOAD_PARTITIONS_NAME: Final = "workloads"
#: The job that runs one workload (partition key = workload name) until it is stopped.
CONSUMER_JOB_NAME: Final = "consume_workload"
#: The job that runs many workloads in one process (partition key = host, ``host.0``, ...), and
#: its dynamic partitions: one per host the discovery sensor placed workloads on.
HOST_JOB_NAME: Final = "consume_host"
HOST_PARTITIONS_NAME: Final = "hosts"
#: The jobs a person stops and starts one workload with, wherever it runs (partition = workload).
STOP_JOB_NAME: Final = "stop_workload"
START_JOB_NAME: Final = "start_workload"
#: The job that rewinds one workload (partition key) to a point in time; while one runs, the
#: discovery sensor launches no consumer run of that workload.
REWIND_JOB_NAME: Final = "rewind_workload"
#: Set on the consumer runs a rewind stopped (the sensor starts them again) and on the rewind
#: run itself: the target, e.g. ``2026-11-25T08:00:00.000Z``.
REWIND_TAG: Final = "lanehouse/rewind"
#: The sensor that registers workloads and starts, restarts and stops their runs.
DISCOVERY_SENSOR_NAME: Final = "workload_discovery"

#: Run tags: which workload a run serves, which spec it runs, which generation it is.
WORKLOAD_TAG: Final = "lanehouse/workload"
SPEC_HASH_TAG: Final = "lanehouse/spec_hash"
GENERATION_TAG: Final = "lanehouse/generation"
#: Which of a workload's replicas a run is (0, 1, ...): each replica is a run of its own.
REPLICA_TAG: Final = "lanehouse/replica"
#: The partitions a consumer run holds now, e.g. ``clicks[0,3]`` (rewritten when they change).
ASSIGNED_TAG: Final = "lanehouse/assigned"
#: Set on a run stopped by ``lanehouse up``'s shutdown (value ``platform``): unlike a run a person
#: terminated, the discovery sensor starts that workload again when the platform comes back.
STOP_REASON_TAG: Final = "lanehouse/stop_reason"
PLATFORM_STOP_REASON: Final = "platform"
#: The run a stop reason was given to: a re-execution copies its parent's tags, these two
#: included, so a reason is the run's own only where this tag names the run.
STOPPED_RUN_TAG: Final = "lanehouse/stopped_run"
#: On dead-letter replay runs (value: the workload); the instance runs one per value at a time.
REPLAY_RUN_TAG: Final = "lanehouse/dead_letter_replay"
#: Dagster's own run tags: the partition a run serves; set on re-executions (with the parent's
#: tags copied, ours included).
PARTITION_TAG: Final = "dagster/partition"
PARENT_RUN_TAG: Final = "dagster/parent_run_id"


def workloads_dir() -> Path:
    """The directory of workload specs (:mod:`orchestration.settings`)."""
    return settings.current().workloads


def replica_unit(workload: str, replica: int) -> str:
    """The name of one replica of a workload, for run keys, heartbeats and the sensor's cursor:
    the workload's own name for replica 0 (what a workload without replicas always was),
    ``<workload>#<i>`` for the others (``#`` never occurs in a workload name)."""
    return workload if replica == 0 else f"{workload}#{replica}"


def unit_workload(unit: str) -> tuple[str, int]:
    """The workload and replica index of a :func:`replica_unit` name."""
    workload, _, replica = unit.partition("#")
    return workload, int(replica) if replica.isdecimal() else 0


def replica_of(tags: Mapping[str, str]) -> int:
    """A run's replica index from its tags (runs launched by hand, without the tag: 0)."""
    raw = tags.get(REPLICA_TAG, "")
    return int(raw) if raw.isdecimal() else 0


def _part(text: str) -> str:
    """Dagster key parts: only word characters, so ``.``, ``-`` and the like become ``_``."""
    return re.sub(r"[^A-Za-z0-9_]", "_", text)


def topic_asset_key(topic: str, kind: SourceKind = "kafka") -> list[str]:
    """The asset key of a topic read by some workload (its observations land there).

    Kafka: ``["topics", "<topic>"]``. Pulsar: ``["topics", "pulsar", tenant, namespace,
    topic]`` from the full name, so ``persistent://public/default/orders`` never meets a
    Kafka topic ``orders`` (or one named ``pulsar``: the keys differ in length).
    """
    if kind == "pulsar":
        tenant, namespace, name = (
            validate_pulsar_topic(topic).removeprefix("persistent://").split("/")
        )
        return ["topics", "pulsar", _part(tenant), _part(namespace), _part(name)]
    return ["topics", _part(topic)]


def stop_tags(run_id: str, reason: str) -> dict[str, str]:
    """The tags that say the platform stopped ``run_id`` on purpose, and why."""
    return {STOP_REASON_TAG: reason, STOPPED_RUN_TAG: run_id}


def stop_reason_of(run_id: str, tags: Mapping[str, str]) -> str | None:
    """Why the platform stopped this run, if it did; never a reason copied from the parent of a
    re-execution (runs stopped before :data:`STOPPED_RUN_TAG` existed carry the reason alone)."""
    reason = tags.get(STOP_REASON_TAG)
    if reason is None:
        return None
    stopped = tags.get(STOPPED_RUN_TAG)
    if stopped is not None:
        return reason if stopped == run_id else None
    return None if PARENT_RUN_TAG in tags else reason
