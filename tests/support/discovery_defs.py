"""A code location for the discovery sensor tests: the real sensor and a stand-in consumer job.

The stand-in has the consumer job's name and partitions; the tests never execute it.
"""

from __future__ import annotations

from dagster import Definitions, job, op

from orchestration.workloads.discovery import workload_discovery_sensor
from orchestration.workloads.names import CONSUMER_JOB_NAME
from orchestration.workloads.partitions import WORKLOAD_PARTITIONS


@op
def consume() -> None:
    """Never runs in these tests."""


@job(name=CONSUMER_JOB_NAME, partitions_def=WORKLOAD_PARTITIONS)
def stand_in() -> None:
    consume()


defs = Definitions(jobs=[stand_in], sensors=[workload_discovery_sensor])
