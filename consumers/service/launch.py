"""From validated workload specs to a running :class:`ConsumerApp` (the CLI and Dagster use this)."""

from __future__ import annotations

import logging
from collections.abc import Callable, Mapping
from pathlib import Path

from consumers.backends.base import Backend, ProducerFactory
from consumers.backends.kafka.consumer import kafka_backend, kafka_producer_factory
from consumers.backends.routing import routed_producer_factory
from consumers.config.clusters import ProducerTarget
from consumers.config.loading import default_lake, import_callable, state_dir
from consumers.config.platform import PlatformConfig, load_platform_config
from consumers.config.pulsar_options import CLIENT_OPTIONS, PRODUCER_OPTIONS
from consumers.config.sources import KafkaSourceSpec, reveal
from consumers.config.spec import WorkloadSpec, resolve_handler, spec_hash
from consumers.engine import event_loop
from consumers.engine.resolution import DeadLetterPolicy, RetryPolicy
from consumers.engine.settings import RunnerSettings
from consumers.errors import LanehouseError
from consumers.execution.interceptors import load_interceptor
from consumers.landing.sink import LandingSettings
from consumers.permits.pool import LocalPermitPool, PermitPool
from consumers.service.app import ConsumerApp, Workload, WorkloadSummary
from consumers.service.http import serve as serve_http
from consumers.service.tap_access import token_from_env

log = logging.getLogger("lanehouse.run")


def settings_from_spec(spec: WorkloadSpec, lake: Path | None = None) -> RunnerSettings:
    """The engine's settings; ``lake`` is where a landing workload lands (default: see
    :func:`consumers.config.loading.default_lake`)."""
    landing = spec.landing
    return RunnerSettings(
        name=spec.name,
        ordering=spec.ordering,
        virtual_partitions=spec.virtual_partitions,
        concurrency=spec.concurrency,
        weight=spec.permits.weight,
        timeout=spec.timeout,
        max_buffered=spec.max_buffered,
        commit_interval=spec.commit_interval,
        drain_timeout=spec.drain_timeout,
        stall_after=spec.stall_after,
        # Offsets must name the same record in the next run (Pulsar's are per session).
        crash_dir=state_dir().resolve() / "crashes" if spec.source.kind == "kafka" else None,
        mode=spec.mode,
        batch_size=spec.batch.size,
        batch_max_wait=spec.batch.max_wait,
        retry=RetryPolicy(
            max_attempts=spec.retries.max_attempts,
            backoff=spec.retries.backoff,
            max_backoff=spec.retries.max_backoff,
            jitter=spec.retries.jitter,
        ),
        dead_letter=(
            DeadLetterPolicy(
                spec.dead_letter.topic,
                spec.dead_letter.max_ratio,
                spec.dead_letter.window,
                spec.dead_letter.write_timeout,
            )
            if spec.dead_letter
            else None
        ),
        output_topic=spec.output.topic if spec.output else None,
        executor=spec.executor,
        processes=spec.processes,
        max_handoff_bytes=spec.max_handoff_bytes,
        landing=(
            LandingSettings(
                lake=lake or default_lake(),
                dataset=landing.dataset,
                workload=spec.name,
                spec_hash=spec_hash(spec),
                flush_rows=landing.flush_rows,
                flush_interval=landing.flush_interval,
            )
            if landing
            else None
        ),
    )


def backend_for(spec: WorkloadSpec) -> Backend:
    """The spec's broker kind as the engine's :class:`Backend` (its clients and, when the
    workload lands, how its lake names and places rows). pulsar-client is imported only for
    Pulsar workloads."""
    source = spec.source
    landing = spec.landing is not None
    if isinstance(source, KafkaSourceSpec):
        return kafka_backend(spec.client_config(), landing)
    from consumers.backends.pulsar.client import PulsarSettings
    from consumers.backends.pulsar.consumer import pulsar_backend

    settings = PulsarSettings(
        service_url=source.service_url,
        subscription=source.subscription,
        subscription_type=source.subscription_type,
        client_options=source.client_options(),
        consumer_options=source.consumer_options(),
    )
    return pulsar_backend(settings, landing)


def sink_producer_factory(spec: WorkloadSpec) -> ProducerFactory | None:
    """The producer of the spec's outputs and dead letters (None without either): one client
    per distinct cluster and properties, behind one producer routing by topic when they differ;
    each fits any record the source can deliver (Kafka: sized from the source's consumer
    properties; Pulsar: dead letters sent in chunks when over the broker's limit)."""
    factories: dict[ProducerTarget, ProducerFactory] = {}
    routes: dict[str, ProducerFactory] = {}
    receiving = spec.client_config() if isinstance(spec.source, KafkaSourceSpec) else {}
    chunked = frozenset([spec.dead_letter.topic]) if spec.dead_letter else frozenset()
    for sink in (spec.output, spec.dead_letter):
        if sink is not None:
            target = spec.producer_target(sink)
            if target not in factories:
                factories[target] = _producer_factory(target, receiving, chunked)
            routes[sink.topic] = factories[target]
    if len(factories) > 1:
        return routed_producer_factory(routes)
    return next(iter(factories.values()), None)


def _producer_factory(
    target: ProducerTarget, receiving: Mapping[str, object], chunked: frozenset[str]
) -> ProducerFactory:
    properties = reveal(dict(target.properties))
    if target.kind == "kafka":
        servers = {**properties, "bootstrap.servers": target.servers}
        return kafka_producer_factory(servers, receiving)
    from consumers.backends.pulsar.producer import pulsar_target_factory

    client = {k: v for k, v in properties.items() if k in CLIENT_OPTIONS}
    producer = {k: v for k, v in properties.items() if k in PRODUCER_OPTIONS}
    return pulsar_target_factory(target.servers, client, producer, chunked)


def workload_from_spec(spec: WorkloadSpec, lake: Path | None = None) -> Workload:
    """Bind a spec to its handler and its broker's backend (imports the handler)."""
    backend = backend_for(spec)
    return Workload(
        settings=settings_from_spec(spec, lake),
        handler=resolve_handler(spec),
        topics=list(spec.source.topics),
        consumer_factory=backend.consumer_factory,
        pool=spec.permits.pool,
        producer_factory=sink_producer_factory(spec) or backend.producer_factory,
        interceptors=tuple(load_interceptor(import_callable(path)) for path in spec.interceptors),
        identify=backend.identify,
        position=backend.position,
        incarnations=backend.incarnations,
    )


def pool_factory(
    platform: PlatformConfig, pool_sizes: dict[str, int] | None = None
) -> Callable[[str, int], PermitPool]:
    """Pools named in the platform config are shared through its database (declared there now,
    so a bad URL fails before any client starts); every other pool is local to this process."""
    permits = platform.permits
    if not permits.pools:
        return LocalPermitPool
    clash = sorted(set(pool_sizes or {}) & set(permits.pools))
    if clash:
        raise LanehouseError(
            f"pool size of {', '.join(clash)} is set in the platform config (shared pools); "
            "drop it from the command line"
        )
    # Imported here: SQLAlchemy adds about 15 MB to a process that shares no pool.
    from consumers.permits.shared import SharedPermitPool
    from consumers.permits.store import PermitStore

    store = PermitStore(permits.database_url())
    store.declare_pools({name: pool.size for name, pool in permits.pools.items()})
    log.info("shared permit pools %s in %s", ", ".join(permits.pools), store.describe())

    def make(name: str, size: int) -> PermitPool:
        if name not in permits.pools:
            return LocalPermitPool(name, size)
        return SharedPermitPool(
            name, store, lease_ttl=permits.lease_ttl, sync_interval=permits.sync_interval
        )

    return make


def build_app(
    specs: list[WorkloadSpec],
    pool_sizes: dict[str, int] | None = None,
    lake: Path | None = None,
    platform: PlatformConfig | None = None,
) -> ConsumerApp:
    """One app for every *enabled* spec; disabled ones are logged and left out. ``platform``
    defaults to the platform config file (:func:`consumers.config.platform.load_platform_config`)."""
    enabled = []
    for spec in specs:
        if spec.enabled:
            enabled.append(workload_from_spec(spec, lake))
        else:
            log.info("workload %s is disabled (enabled: false); not starting it", spec.name)
    if not enabled:
        return ConsumerApp([])
    factory = pool_factory(platform or load_platform_config(), pool_sizes)
    return ConsumerApp(enabled, pool_sizes=pool_sizes, pool_factory=factory)


def run_specs(
    specs: list[WorkloadSpec],
    *,
    pool_sizes: dict[str, int] | None = None,
    platform: PlatformConfig | None = None,
    until_idle: float | None = None,
    metrics_port: int | None = None,
    metrics_host: str = "127.0.0.1",
    install_signal_handlers: bool = True,
    lake: Path | None = None,
) -> list[WorkloadSummary]:
    """Run the workloads until a signal (graceful), idleness, or a source failure."""
    app = build_app(specs, pool_sizes, lake, platform)
    if not app.workloads:
        return []
    server = None
    if metrics_port is not None:  # the tap's token read once, here; the server keeps it
        server = serve_http(app, metrics_port, metrics_host, tap_token=token_from_env())
    try:
        return event_loop.run(
            app.run(until_idle=until_idle, install_signal_handlers=install_signal_handlers)
        )
    finally:
        if server is not None:
            server.shutdown()
