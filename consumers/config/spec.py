"""The workload spec: one YAML file per workload, validated before any record is read.

This is a public contract (reference: ``docs/configuration.md``). Loading goes
read YAML -> interpolate ``${VAR}`` -> validate (frozen pydantic models, unknown fields rejected)
-> import the handler; every failure is a :class:`~consumers.errors.SpecError` naming the file
and the dotted field path. A spec may name clusters of the platform config file instead of
writing their servers and properties (:mod:`consumers.config.clusters`); they are resolved
before validation. Secret client properties are ``SecretStr``: masked in ``repr``, ``str`` and
``model_dump(mode="json")``; only the methods handing them to a client reveal them.
"""

from __future__ import annotations

import functools
import hashlib
import json
import os
import re
from collections.abc import Callable, Iterable, Mapping
from typing import Annotated, Any, Literal

from pydantic import (
    AfterValidator,
    Field,
    SecretStr,
    ValidationError,
    ValidationInfo,
    field_validator,
    model_validator,
)

from consumers.config.catalog import CATALOG_FIELDS, ChecksSpec, Owner, TagKey, TagValue
from consumers.config.clusters import Cluster, ProducerTarget, producer_target, resolve_clusters
from consumers.config.loading import (
    Duration,
    FrozenModel,
    first_error,
    import_callable,
    interpolate,
    read_yaml_mapping,
    spec_files,
)
from consumers.config.names import Name
from consumers.config.overlaps import check_overlaps, option_problem
from consumers.config.platform import PlatformConfig, load_platform_config
from consumers.config.replicas import Replicas, replica_problem
from consumers.config.sections import (
    BatchSpec,
    DeadLetterSpec,
    LandingSpec,
    OutputSpec,
    PermitSpec,
    RetrySpec,
)
from consumers.config.sources import (
    KafkaSourceSpec,
    SourceSpec,
    check_sink_property,
    reveal,
)
from consumers.errors import HandlerImportError, SpecError
from consumers.execution.executors import (
    MAX_HANDOFF_BYTES,
    Executor,
    call_problem,
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


HandlerPath = Annotated[str, AfterValidator(_check_handler)]


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
    #: A partition with records behind it that delivers nothing this long is recovered.
    stall_after: Duration = Field(default=30.0, gt=0)
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
    #: How many processes (runs under Dagster) consume it together: fixed, or autoscaled on lag.
    replicas: Replicas = Replicas()
    #: Under Dagster: share a host run with other workloads (when hosts are on), or run alone.
    run: Literal["shared", "own"] = "shared"
    #: The named clusters this spec uses, copied from the platform config when it was loaded.
    clusters: dict[Name, Cluster] = Field(default_factory=dict)
    #: Who answers for it, tags, and its checks' thresholds (how the catalog shows it).
    owners: tuple[Owner, ...] = ()
    tags: dict[TagKey, TagValue] = Field(default_factory=dict)
    checks: ChecksSpec = ChecksSpec()

    @field_validator("processes", "max_handoff_bytes")
    @classmethod
    def _only_for_processes(cls, value: int, info: ValidationInfo) -> int:
        executor = info.data.get("executor", "auto")
        if executor != "process":
            raise ValueError(f"only for executor: process (this workload's is {executor})")
        return value

    @field_validator("replicas")
    @classmethod
    def _check_replicas(cls, replicas: Replicas, info: ValidationInfo) -> Replicas:
        source = info.data.get("source")
        if source is None or isinstance(source, KafkaSourceSpec):
            return replicas
        if replicas.autoscaled:
            raise ValueError(
                "autoscaling reads the lag of a Kafka consumer group from the broker; a Pulsar "
                "workload takes a fixed count (replicas: N)"
            )
        problem = replica_problem(source.subscription_type, info.data.get("ordering", "key"))
        if replicas.max > 1 and problem is not None:
            raise ValueError(problem)
        return replicas

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
        for key, value in sink.config.items():
            try:
                check_sink_property(source.kind, key, value)
            except ValueError as exc:
                raise ValueError(f"config: {exc}") from None
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
        if self.landing and (problem := option_problem(self.source, self.landing)):
            raise ValueError(problem)
        self._check_clusters()
        return self

    def _check_clusters(self) -> None:
        sinks = [sink for sink in (self.output, self.dead_letter) if sink is not None]
        for name in {self.source.cluster, *(sink.cluster for sink in sinks)} - {None}:
            if name not in self.clusters:
                raise ValueError(f"cluster {name!r} is named but not among clusters")
        same_topic = len(sinks) == 2 and sinks[0].topic == sinks[1].topic
        if same_topic and self.producer_target(sinks[0]) != self.producer_target(sinks[1]):
            raise ValueError(
                "output.topic and dead_letter.topic are one topic name with two producers "
                "(clusters or properties): use two topic names"
            )

    def producer_target(self, sink: OutputSpec | DeadLetterSpec | None) -> ProducerTarget:
        """Where ``sink`` is produced (``None``: a sink naming nothing, on the source's cluster)."""
        cluster, config = (sink.cluster, sink.config) if sink is not None else (None, {})
        return producer_target(self.source, cluster, config, self.clusters)

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
    """A stable 16-hex-digit digest of the validated spec, the clusters it names included (a
    rotated password changes it), ``replicas`` and ``run`` left out; secrets enter as sha256."""
    data = spec.model_dump()
    # Neither how many run it and where, nor owners, tags and checks change what each run does.
    for field in ("replicas", "run", *CATALOG_FIELDS):
        del data[field]
    if data["landing"] is not None:  # what discovery allows, not what a run does
        del data["landing"]["allow_overlap"]
    for field, unset in _LATER_FIELDS:
        if data[field] == unset:
            del data[field]
    for section, field, unset in _CLUSTER_FIELDS:
        if data[section] is not None and data[section][field] == unset:
            del data[section][field]
    canonical = json.dumps(
        data, sort_keys=True, separators=(",", ":"), ensure_ascii=False, default=_secret_digest
    )
    return hashlib.sha256(canonical.encode()).hexdigest()[:16]


#: Settings added after specs were first hashed, left out while at their default: a file that
#: does not use them keeps the hash (and its run) it had before they existed.
_LATER_FIELDS: tuple[tuple[str, object], ...] = (("stall_after", 30.0), ("clusters", {}))

_CLUSTER_FIELDS: tuple[tuple[str, str, object], ...] = (
    ("source", "cluster", None),
    *(
        (sink, field, unset)
        for sink in ("output", "dead_letter")
        for field, unset in (("cluster", None), ("config", {}))
    ),
    ("dead_letter", "write_timeout", 300.0),
)


def _secret_digest(value: object) -> object:
    if isinstance(value, SecretStr):
        return {"secret_sha256": hashlib.sha256(value.get_secret_value().encode()).hexdigest()}
    raise TypeError(f"{type(value).__name__} in a spec is not JSON")


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
    if (unfit := call_problem(handler)) is not None:
        raise SpecError(where, "handler", f"{spec.handler!r} {unfit}")
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
    platform: PlatformConfig | None = None,
) -> WorkloadSpec:
    """Read, interpolate, resolve clusters and validate one spec file, then (by default) import
    its handler. The clusters are ``platform``'s; by default the platform config file's
    (:func:`load_platform_config` with ``env``), read only when the spec names a cluster."""
    return _load_spec(path, env, import_handler, _platform_loader(platform, env))


def _platform_loader(
    platform: PlatformConfig | None, env: Mapping[str, str] | None
) -> Callable[[], PlatformConfig]:
    if platform is not None:
        return lambda: platform
    return functools.cache(lambda: load_platform_config(env=env))


def _load_spec(
    path: str | os.PathLike[str],
    env: Mapping[str, str] | None,
    import_handler: bool,
    platform: Callable[[], PlatformConfig],
) -> WorkloadSpec:
    file = os.fspath(path)
    data = interpolate(read_yaml_mapping(file), os.environ if env is None else env, file)
    sections = (data.get(section) for section in ("source", "output", "dead_letter"))
    if any(isinstance(section, dict) and "cluster" in section for section in sections):
        data = resolve_clusters(data, platform().clusters, file)
    elif "clusters" in data:
        data = resolve_clusters(data, {}, file)  # refused with the reason
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
    platform: PlatformConfig | None = None,
) -> list[WorkloadSpec]:
    """Load several spec files (a directory means its ``*.yaml``/``*.yml``); names must be
    unique, and no two may land one topic into one dataset (:mod:`consumers.config.overlaps`).
    ``platform`` as in :func:`load_spec` (the file is read at most once)."""
    specs: list[WorkloadSpec] = []
    seen: dict[str, str] = {}
    loader = _platform_loader(platform, env)
    for path in spec_files(paths):
        spec = _load_spec(path, env, import_handler, loader)
        if spec.name in seen:
            raise SpecError(
                str(path),
                "name",
                f"workload name {spec.name!r} is already used by {seen[spec.name]}",
            )
        seen[spec.name] = str(path)
        specs.append(spec)
    check_overlaps(zip(seen.values(), specs, strict=True))
    return specs
