"""The workload spec: one YAML file per workload, validated before any record is read.

This is a public contract (reference: ``docs/configuration.md``). Loading goes
read YAML -> interpolate ``${VAR}`` -> validate (frozen pydantic models, unknown fields rejected)
-> import the handler; every failure is a :class:`~consumers.errors.SpecError` naming the file
and the dotted field path. Secret client properties are ``SecretStr``: masked in ``repr``,
``str`` and ``model_dump(mode="json")``; only :meth:`WorkloadSpec.client_config` reveals them.
"""

from __future__ import annotations

import hashlib
import json
import os
import re
from collections.abc import Callable, Iterable, Mapping
from typing import Annotated, Any, Literal

from pydantic import (
    AfterValidator,
    BeforeValidator,
    Field,
    SecretStr,
    ValidationError,
    ValidationInfo,
    field_validator,
    model_validator,
)

from consumers.config.loading import (
    FrozenModel,
    first_error,
    import_callable,
    interpolate,
    parse_duration,
    read_yaml_mapping,
    spec_files,
)
from consumers.config.names import check_name
from consumers.config.sources import KafkaSourceSpec, SourceSpec, reveal
from consumers.errors import HandlerImportError, SpecError
from consumers.execution.executors import (
    MAX_HANDOFF_BYTES,
    Executor,
    check_executor,
    process_problem,
)
from consumers.execution.interceptors import load_interceptor

__all__ = [
    "LandingSpec",
    "PermitSpec",
    "WorkloadSpec",
    "load_spec",
    "load_specs",
    "resolve_handler",
    "spec_hash",
]

_HANDLER = re.compile(r"[A-Za-z_]\w*(?:\.[A-Za-z_]\w*)*:[A-Za-z_]\w*(?:\.[A-Za-z_]\w*)*")


def _check_handler(value: str) -> str:
    if not _HANDLER.fullmatch(value):
        raise ValueError(
            f"{value!r} is not an import path: use 'package.module:callable', e.g. 'my_package.handlers:enrich'"
        )
    return value


Name = Annotated[str, AfterValidator(check_name)]
HandlerPath = Annotated[str, AfterValidator(_check_handler)]
Duration = Annotated[float, BeforeValidator(parse_duration)]


class PermitSpec(FrozenModel):
    """Where the workload takes its permits from and how much of the pool it may claim."""

    pool: Name = "default"
    weight: float = Field(default=1.0, gt=0, allow_inf_nan=False)


#: An output or dead-letter topic; checked against the source's kind by ``WorkloadSpec``.
TopicName = Annotated[str, Field(min_length=1)]


class RetrySpec(FrozenModel):
    """How often a failing record is tried, and how long to wait between attempts."""

    max_attempts: int = Field(default=3, ge=1)
    backoff: Duration = Field(default=0.2, ge=0)
    max_backoff: Duration = Field(default=60.0, ge=0)
    jitter: bool = True


class DeadLetterSpec(FrozenModel):
    """Where records go after their last attempt, the safety valve, and scheduled replay."""

    topic: TopicName
    max_ratio: float = Field(default=0.2, gt=0, le=1, allow_inf_nan=False)
    window: int = Field(default=1000, ge=1)
    #: Replayed by the ``dead_letter_replay`` schedule (Kafka only) once that is switched on.
    scheduled_replay: bool = False
    #: A dead letter replayed this often already is left where it is.
    max_replays: int = Field(default=3, ge=1)

    @model_validator(mode="after")
    def _valve_allows_one(self) -> DeadLetterSpec:
        if self.max_ratio * self.window < 1:
            raise ValueError(
                f"max_ratio x window = {self.max_ratio * self.window:g} allows no dead letter at "
                "all: the first one would stop the workload; raise max_ratio or window"
            )
        return self


class OutputSpec(FrozenModel):
    """The topic ``Forward`` outcomes are produced to, in source order per partition."""

    topic: TopicName


_DATASET = re.compile(r"[a-z][a-z0-9_]{0,62}")


def _check_dataset(value: str) -> str:
    if not _DATASET.fullmatch(value):
        raise ValueError(
            f"{value!r} is not allowed: use 1-63 characters of lowercase letters, digits and '_', "
            "starting with a letter (it becomes a directory of the lake and a Dagster asset key)"
        )
    return value


class LandingSpec(FrozenModel):
    """Records land as Parquet under ``<lake>/landed/<dataset>/``; see docs/lake.md."""

    dataset: Annotated[str, AfterValidator(_check_dataset)]
    flush_rows: int = Field(default=50_000, ge=1)
    flush_interval: Duration = Field(default=60.0, gt=0)
    #: The directory level of a landed file; only the record's UTC day is supported.
    partition_by: Literal["event_date"] = "event_date"


class BatchSpec(FrozenModel):
    """Batch and unique modes: at most ``size`` records, or what arrived within ``max_wait``."""

    size: int = Field(default=500, ge=1)
    max_wait: Duration = Field(default=2.0, ge=0)


class WorkloadSpec(FrozenModel):
    """One workload: what to read, which handler runs, and how the engine schedules it."""

    name: Name
    source: SourceSpec
    #: Optional with ``landing`` (records then land as they are).
    handler: HandlerPath | None = None
    ordering: Literal["key", "partition", "none"] = "key"
    virtual_partitions: int = Field(default=0, ge=0)
    concurrency: int = Field(default=100, ge=1)
    permits: PermitSpec = PermitSpec()
    timeout: Duration = Field(default=30.0, gt=0)
    enabled: bool = True
    #: Per partition; None: 10,000, or 40 per unit of concurrency above 250.
    max_buffered: int | None = Field(default=None, ge=1)
    commit_interval: Duration = Field(default=1.0, gt=0)
    drain_timeout: Duration = Field(default=30.0, ge=0)
    mode: Literal["single", "batch", "unique"] = "single"
    batch: BatchSpec = BatchSpec()
    retries: RetrySpec = RetrySpec()
    dead_letter: DeadLetterSpec | None = None
    output: OutputSpec | None = None
    landing: LandingSpec | None = None
    interceptors: tuple[HandlerPath, ...] = ()
    #: Where a plain def handler runs: auto (threads, inline once proven fast) | thread | process.
    executor: Executor = "auto"
    #: Worker processes for ``executor: process``; 0 means one per CPU.
    processes: int = Field(default=0, ge=0)
    #: ``executor: process``: the most bytes of keys, values and headers one call may send.
    max_handoff_bytes: int = Field(default=MAX_HANDOFF_BYTES, ge=1)

    @field_validator("processes", "max_handoff_bytes")
    @classmethod
    def _only_for_processes(cls, value: int, info: ValidationInfo) -> int:
        executor = info.data.get("executor", "auto")
        if executor != "process":
            raise ValueError(f"only for executor: process (this workload's is {executor})")
        return value

    @field_validator("dead_letter", "output")
    @classmethod
    def _check_sink_topic(cls, sink: Any, info: ValidationInfo) -> Any:
        source = info.data.get("source")
        if sink is None or source is None:
            return sink
        try:
            topic = source.topic_name(sink.topic)
        except ValueError as exc:
            raise ValueError(f"topic: {exc}") from None
        return sink.model_copy(update={"topic": topic})

    @model_validator(mode="after")
    def _no_loops(self) -> WorkloadSpec:
        for field, topic in (
            ("dead_letter.topic", self.dead_letter and self.dead_letter.topic),
            ("output.topic", self.output and self.output.topic),
        ):
            if topic and topic in self.source.topics:
                raise ValueError(f"{field} {topic!r} is also a source topic: that would loop")
        if self.handler is None and self.landing is None:
            raise ValueError("handler: required unless the workload only lands records (landing)")
        if self.landing and self.output:
            raise ValueError(
                "landing and output: a workload either lands its records or forwards them to "
                "an output topic; declare a second workload on the output topic to land that"
            )
        if self.dead_letter and self.dead_letter.scheduled_replay and self.source.kind != "kafka":
            raise ValueError(
                "dead_letter.scheduled_replay: replay reads Kafka dead-letter topics only; "
                "this workload reads Pulsar"
            )
        return self

    @model_validator(mode="before")
    @classmethod
    def _default_group(cls, data: Any) -> Any:
        if isinstance(data, dict) and isinstance(data.get("name"), str):
            source = data.get("source")
            field = (
                "subscription"
                if isinstance(source, dict) and source.get("kind") == "pulsar"
                else "group"
            )
            if isinstance(source, dict) and source.get(field) is None:
                return {**data, "source": {**source, field: f"lanehouse.{data['name']}"}}
        return data

    @field_validator("virtual_partitions")
    @classmethod
    def _check_virtual_partitions(cls, value: int, info: ValidationInfo) -> int:
        ordering = info.data.get("ordering")
        if value > 0 and ordering is not None and ordering != "key":
            raise ValueError(
                f"virtual_partitions > 0 needs ordering: key (got ordering: {ordering}); use 0 to disable"
            )
        return value

    def client_config(self) -> dict[str, str | int | float | bool]:
        """The librdkafka properties for this workload, secrets revealed: give them only to the client."""
        if not isinstance(self.source, KafkaSourceSpec):
            raise TypeError(
                f"workload {self.name!r} reads Pulsar; librdkafka properties need Kafka"
            )
        config = reveal(self.source.config)
        config.update(
            {
                "bootstrap.servers": self.source.bootstrap_servers,
                "group.id": self.source.group,
                "enable.auto.commit": False,
                "enable.auto.offset.store": False,
            }
        )
        return config


def spec_hash(spec: WorkloadSpec) -> str:
    """A stable 16-hex-digit digest of the validated spec; a secret enters only as its sha256."""
    data = spec.model_dump(mode="json")
    for key, value in spec.source.config.items():
        if isinstance(value, SecretStr):
            digest = hashlib.sha256(value.get_secret_value().encode()).hexdigest()
            data["source"]["config"][key] = {"secret_sha256": digest}
    canonical = json.dumps(data, sort_keys=True, separators=(",", ":"), ensure_ascii=False)
    return hashlib.sha256(canonical.encode()).hexdigest()[:16]


def resolve_handler(spec: WorkloadSpec, *, file: str | None = None) -> Callable[..., object]:
    """Import and return the spec's handler (cached per import path); SpecError on failure.

    A landing workload without a handler gets one that lands every record as it is.
    """
    if spec.handler is None:
        from consumers.landing.sink import land_as_is

        return land_as_is
    where = file or f"workload {spec.name!r}"
    try:
        handler = import_callable(spec.handler)
    except HandlerImportError as exc:
        raise SpecError(where, "handler", str(exc)) from exc.__cause__
    problem = check_executor(handler, spec.executor)
    if problem is None and spec.executor == "process":
        problem = process_problem(handler)
    if problem is not None:
        raise SpecError(where, "executor", problem)
    return handler


def load_spec(
    path: str | os.PathLike[str],
    *,
    env: Mapping[str, str] | None = None,
    import_handler: bool = True,
) -> WorkloadSpec:
    """Read, interpolate and validate one spec file, then (by default) import its handler."""
    file = os.fspath(path)
    data = interpolate(read_yaml_mapping(file), os.environ if env is None else env, file)
    try:
        spec = WorkloadSpec.model_validate(data)
    except ValidationError as exc:
        raise SpecError(file, *first_error(exc, WorkloadSpec)) from exc
    if import_handler:
        resolve_handler(spec, file=file)
        for index, path in enumerate(spec.interceptors):
            try:
                load_interceptor(import_callable(path))
            except HandlerImportError as exc:
                raise SpecError(file, f"interceptors[{index}]", str(exc)) from exc.__cause__
            except Exception as exc:  # instantiating user code may raise anything
                reason = f"{path!r} is not an interceptor: {type(exc).__name__}: {exc}"
                raise SpecError(file, f"interceptors[{index}]", reason) from exc
    return spec


def load_specs(
    paths: Iterable[str | os.PathLike[str]],
    *,
    env: Mapping[str, str] | None = None,
    import_handler: bool = True,
) -> list[WorkloadSpec]:
    """Load several spec files (a directory means its ``*.yaml``/``*.yml``); names must be unique."""
    specs: list[WorkloadSpec] = []
    seen: dict[str, str] = {}
    for path in spec_files(paths):
        spec = load_spec(path, env=env, import_handler=import_handler)
        if spec.name in seen:
            raise SpecError(
                str(path),
                "name",
                f"workload name {spec.name!r} is already used by {seen[spec.name]}",
            )
        seen[spec.name] = str(path)
        specs.append(spec)
    return specs
