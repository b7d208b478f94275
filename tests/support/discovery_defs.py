"""A code location for the discovery sensor tests: the real sensor and stand-in consumer and
host jobs.

The stand-ins have the real jobs' names and partitions; the tests never execute them.
"""

from __future__ import annotations

from dagster import Definitions, job, op

from orchestration.workloads.discovery import build_discovery_sensor
from orchestration.workloads.host_job import HOST_PARTITIONS
from orchestration.workloads.names import CONSUMER_JOB_NAME, HOST_JOB_NAME
from orchestration.workloads.partitions import WORKLOAD_PARTITIONS


@op
def consume() -> None:
    """Never runs in these tests."""


@job(name=CONSUMER_JOB_NAME, partitions_def=WORKLOAD_PARTITIONS)
def stand_in() -> None:
    consume()


@op
def host() -> None:
    """Never runs in these tests."""


@job(name=HOST_JOB_NAME, partitions_def=HOST_PARTITIONS)
def host_stand_in() -> None:
    host()


STAND_INS = [stand_in, host_stand_in]
defs = Definitions(jobs=STAND_INS, sensors=[build_discovery_sensor(jobs=STAND_INS)])
