"""The ``workloads`` dynamic partitions: one partition per workload name, shared by the
consumer job, the replay job and the discovery sensor (which adds and deletes them).

Apart from :mod:`orchestration.workloads.names` because it is a Dagster object and that module
stays importable without Dagster.
"""

from __future__ import annotations

from typing import Final

from dagster import DynamicPartitionsDefinition

from orchestration.workloads.names import WORKLOAD_PARTITIONS_NAME

#: The UI shows one row per workload.
WORKLOAD_PARTITIONS: Final = DynamicPartitionsDefinition(name=WORKLOAD_PARTITIONS_NAME)
