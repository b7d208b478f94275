"""Lanehouse's consumer engine: lanes, permits and a commit engine over Kafka and Pulsar clients.

The public API is what ``__all__`` lists; everything else may change without notice.
"""

from consumers.config.spec import WorkloadSpec, load_spec, load_specs
from consumers.engine.settings import RunnerSettings
from consumers.errors import (
    BrokerError,
    DeadLetterRatioExceeded,
    EngineError,
    HandlerError,
    HandlerTimeout,
    LanehouseError,
    SpecError,
)
from consumers.outcomes import DeadLetter, Drop, Forward, Land, OutputRecord, Retry
from consumers.permits.pool import LocalPermitPool, PermitPool
from consumers.record import Record
from consumers.service.app import ConsumerApp, Workload, WorkloadSummary
from consumers.service.launch import run_specs

__all__ = [
    "BrokerError",
    "ConsumerApp",
    "DeadLetter",
    "DeadLetterRatioExceeded",
    "Drop",
    "EngineError",
    "Forward",
    "HandlerError",
    "HandlerTimeout",
    "Land",
    "LanehouseError",
    "LocalPermitPool",
    "OutputRecord",
    "PermitPool",
    "Record",
    "Retry",
    "RunnerSettings",
    "SpecError",
    "Workload",
    "WorkloadSpec",
    "WorkloadSummary",
    "load_spec",
    "load_specs",
    "run_specs",
]
