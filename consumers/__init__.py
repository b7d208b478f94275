"""Lanehouse's consumer engine: lanes, permits and a commit engine over Kafka and Pulsar clients.

The public API is what ``__all__`` lists; everything else may change without notice.
"""

from consumers.app import ConsumerApp, Workload, WorkloadSummary
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
from consumers.permits import LocalPermitPool, PermitPool
from consumers.record import Record
from consumers.run import run_specs
from consumers.runner import RunnerSettings
from consumers.spec import WorkloadSpec, load_spec, load_specs

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
