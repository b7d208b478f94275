"""Named clusters: brokers declared once in the platform config file and named by workload specs.

    # lanehouse.yaml
    clusters:
      prod-eu:
        kind: kafka
        bootstrap_servers: broker-1.eu:9093,broker-2.eu:9093
        config: {security.protocol: SASL_SSL, sasl.username: lanehouse, sasl.password: ${KAFKA_PASSWORD}}
        producer: {linger.ms: 20, compression.type: lz4}

    # a workload spec
    source: {cluster: prod-eu, topics: [clicks]}
    dead_letter: {topic: clicks.dlq, cluster: backup-eu}

:func:`resolve_clusters` runs on a spec file's data before it is validated: a source naming a
cluster gets the cluster's servers and its ``config`` under the source's own (the source's keys
win); the clusters a spec names are copied into it (``WorkloadSpec.clusters``), so a changed
cluster changes the spec's hash, and :func:`producer_target` can say where outputs and dead
letters go without the platform config at hand. Secrets stay ``SecretStr`` all the way.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Annotated, Any, Final, Literal

from pydantic import Field, field_validator

from consumers.config.loading import FrozenModel
from consumers.config.pulsar_options import validate_pulsar_url
from consumers.config.sources import (
    ConfigValue,
    KafkaProperties,
    KafkaSourceSpec,
    PulsarOptions,
    PulsarProducerOptions,
    PulsarSourceSpec,
    reveal,
)
from consumers.errors import SpecError

#: The field that holds a cluster's address, per kind.
SERVERS: Final[Mapping[str, str]] = {"kafka": "bootstrap_servers", "pulsar": "service_url"}
#: The sections of a spec that may name a cluster; outputs and dead letters only produce.
SINKS: Final = ("output", "dead_letter")


class KafkaCluster(FrozenModel):
    """A Kafka cluster: its bootstrap list, client properties and producer defaults."""

    kind: Literal["kafka"]
    bootstrap_servers: str = Field(min_length=1)
    #: librdkafka properties of every client on this cluster (SASL, TLS, client.id...).
    config: KafkaProperties = Field(default_factory=dict)
    #: More properties for producers of outputs and dead letters on this cluster.
    producer: KafkaProperties = Field(default_factory=dict)


class PulsarCluster(FrozenModel):
    """A Pulsar service: its URL, client options and producer defaults."""

    kind: Literal["pulsar"]
    service_url: str = Field(min_length=1)
    config: PulsarOptions = Field(default_factory=dict)
    producer: PulsarProducerOptions = Field(default_factory=dict)

    @field_validator("service_url")
    @classmethod
    def _check_url(cls, url: str) -> str:
        return validate_pulsar_url(url)


Cluster = Annotated[KafkaCluster | PulsarCluster, Field(discriminator="kind")]


def servers(cluster: KafkaCluster | PulsarCluster) -> str:
    """The cluster's bootstrap list or service URL."""
    return cluster.bootstrap_servers if isinstance(cluster, KafkaCluster) else cluster.service_url


def resolve_clusters(
    data: dict[str, Any], clusters: Mapping[str, KafkaCluster | PulsarCluster], file: str
) -> dict[str, Any]:
    """``data`` (a spec file, interpolated) with the clusters it names resolved; a
    :class:`SpecError` naming ``file`` and the field for an unknown cluster, one of the wrong
    kind, or a source with both a cluster and inline servers."""
    if "clusters" in data:
        raise SpecError(
            file, "clusters", "clusters are declared in the platform config file (lanehouse.yaml)"
        )
    named: dict[str, KafkaCluster | PulsarCluster] = {}
    source = data.get("source")
    if isinstance(source, dict) and "cluster" in source:
        cluster = _lookup(source["cluster"], clusters, file, "source")
        named[source["cluster"]] = cluster
        inline = [field for field in SERVERS.values() if field in source]
        if inline:
            raise SpecError(
                file,
                "source.cluster",
                f"set either cluster or {inline[0]}, not both (the cluster has the servers)",
            )
        kind = source.get("kind", cluster.kind)
        if kind != cluster.kind:
            raise SpecError(
                file,
                "source.cluster",
                f"cluster {source['cluster']!r} is a {cluster.kind} cluster, but source.kind is "
                f"{kind}",
            )
        config = source.get("config", {})
        if isinstance(config, dict):  # else pydantic reports the type
            config = {**reveal(cluster.config), **config}
        source = {**source, "kind": kind, SERVERS[kind]: servers(cluster), "config": config}
        data = {**data, "source": source}
    source_kind = source.get("kind") if isinstance(source, dict) else None
    for section in SINKS:
        sink = data.get(section)
        if isinstance(sink, dict) and sink.get("cluster") is not None:
            cluster = _lookup(sink["cluster"], clusters, file, section)
            if source_kind is not None and cluster.kind != source_kind:
                raise SpecError(
                    file,
                    f"{section}.cluster",
                    f"cluster {sink['cluster']!r} is a {cluster.kind} cluster, but the source "
                    f"reads {source_kind}: outputs and dead letters go to a cluster of the "
                    "source's kind",
                )
            named[sink["cluster"]] = cluster
    return {**data, "clusters": named} if named else data


def _lookup(
    name: object, clusters: Mapping[str, KafkaCluster | PulsarCluster], file: str, section: str
) -> KafkaCluster | PulsarCluster:
    if isinstance(name, str) and name in clusters:
        return clusters[name]
    known = (
        f"known clusters: {', '.join(sorted(clusters))}"
        if clusters
        else "the platform config file (LANEHOUSE_CONFIG, else ./lanehouse.yaml) declares none"
    )
    raise SpecError(file, f"{section}.cluster", f"unknown cluster {name!r}; {known}")


@dataclass(frozen=True)
class ProducerTarget:
    """Where one output or dead-letter topic is produced, and with which client properties
    (secrets still ``SecretStr``; the backend reveals them for the client only)."""

    kind: str
    servers: str
    properties: tuple[tuple[str, ConfigValue], ...]


def producer_target(
    source: KafkaSourceSpec | PulsarSourceSpec,
    sink_cluster: str | None,
    sink_config: Mapping[str, ConfigValue],
    clusters: Mapping[str, KafkaCluster | PulsarCluster],
) -> ProducerTarget:
    """The producer of a sink: the source's connection when the sink names no cluster or the
    source's own, else its cluster's; then the cluster's ``producer`` defaults, then the sink's
    own ``config``. Equal targets share one producer."""
    if sink_cluster is None or sink_cluster == source.cluster:
        address = (
            source.bootstrap_servers if isinstance(source, KafkaSourceSpec) else source.service_url
        )
        base: Mapping[str, ConfigValue] = source.config
        cluster = clusters.get(source.cluster) if source.cluster else None
    else:
        cluster = clusters[sink_cluster]
        address, base = servers(cluster), cluster.config
    defaults = cluster.producer if cluster is not None else {}
    properties = {**base, **defaults, **sink_config}
    return ProducerTarget(source.kind, address, tuple(sorted(properties.items())))
