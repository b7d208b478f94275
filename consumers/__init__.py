"""Lanehouse's consumer engine: lanes, permits and a commit engine over Kafka and Pulsar clients.

The public API is what ``__all__`` lists (``tests/unit/test_public_api.py`` holds it equal to
the public names here, and checks that every type an exported class or function takes or
returns is exported too); everything else may change without notice.
"""

from consumers.backends.base import ConsumerLike, MessageLike, ProducerLike
from consumers.clock import Clock
from consumers.config.catalog import ChecksSpec
from consumers.config.clusters import KafkaCluster, ProducerTarget, PulsarCluster
from consumers.config.platform import PermitsConfig, PlatformConfig, PoolConfig
from consumers.config.replicas import Replicas
from consumers.config.sections import (
    BatchSpec,
    DeadLetterSpec,
    LandingSpec,
    OutputSpec,
    PermitSpec,
    RetrySpec,
)
from consumers.config.sources import KafkaSourceSpec, PulsarSourceSpec
from consumers.config.spec import WorkloadSpec, load_spec, load_specs
from consumers.engine.resolution import DeadLetterPolicy, RetryPolicy
from consumers.engine.settings import RunnerSettings
from consumers.errors import (
    BrokerError,
    CallFailed,
    DamagedFile,
    DeadLetterRatioExceeded,
    DeliveryError,
    EngineError,
    FinalCommitFailed,
    HandlerError,
    HandlerImportError,
    HandlerTimeout,
    HandoffTooLarge,
    LagUnavailable,
    LandingError,
    LanehouseError,
    PermitStoreError,
    PlaceError,
    ProcessExecutorError,
    RemoteError,
    ReplyUnreadable,
    RewindRefused,
    SinkWriteError,
    SpecError,
    TopicMissing,
    TopicReplaced,
    WorkerDied,
)
from consumers.execution.interceptors import Interceptor
from consumers.landing.sink import LandingSettings
from consumers.outcomes import DeadLetter, Drop, Forward, Land, Outcome, OutputRecord, Retry
from consumers.permits.pool import LocalPermitPool, PermitClient, PermitPool
from consumers.record import Record, SourceIdentity
from consumers.service.app import ConsumerApp, Retired, Workload, WorkloadSummary
from consumers.service.launch import run_specs

__all__ = [
    "BatchSpec",
    "BrokerError",
    "CallFailed",
    "ChecksSpec",
    "Clock",
    "ConsumerApp",
    "ConsumerLike",
    "DamagedFile",
    "DeadLetter",
    "DeadLetterPolicy",
    "DeadLetterRatioExceeded",
    "DeadLetterSpec",
    "DeliveryError",
    "Drop",
    "EngineError",
    "FinalCommitFailed",
    "Forward",
    "HandlerError",
    "HandlerImportError",
    "HandlerTimeout",
    "HandoffTooLarge",
    "Interceptor",
    "KafkaCluster",
    "KafkaSourceSpec",
    "LagUnavailable",
    "Land",
    "LandingError",
    "LandingSettings",
    "LandingSpec",
    "LanehouseError",
    "LocalPermitPool",
    "MessageLike",
    "Outcome",
    "OutputRecord",
    "OutputSpec",
    "PermitClient",
    "PermitPool",
    "PermitSpec",
    "PermitStoreError",
    "PermitsConfig",
    "PlaceError",
    "PlatformConfig",
    "PoolConfig",
    "ProcessExecutorError",
    "ProducerLike",
    "ProducerTarget",
    "PulsarCluster",
    "PulsarSourceSpec",
    "Record",
    "RemoteError",
    "Replicas",
    "ReplyUnreadable",
    "Retired",
    "Retry",
    "RetryPolicy",
    "RetrySpec",
    "RewindRefused",
    "RunnerSettings",
    "SinkWriteError",
    "SourceIdentity",
    "SpecError",
    "TopicMissing",
    "TopicReplaced",
    "WorkerDied",
    "Workload",
    "WorkloadSpec",
    "WorkloadSummary",
    "load_spec",
    "load_specs",
    "run_specs",
]
