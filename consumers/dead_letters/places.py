"""A workload's dead letters by its spec, on either broker: where they are read (the dead-letter
topic's cluster, its own when ``dead_letter.cluster`` names another) and where replays go (the
source's cluster). The command line and the scheduled replay job both come through here."""

from __future__ import annotations

from dataclasses import dataclass

from consumers.backends.kafka.consumer import ENGINE_OWNED
from consumers.config.clusters import servers
from consumers.config.pulsar_options import CLIENT_OPTIONS as PULSAR_CLIENT_OPTIONS
from consumers.config.sources import KafkaSourceSpec, reveal
from consumers.config.spec import WorkloadSpec
from consumers.dead_letters.reading import list_dead_letters
from consumers.dead_letters.replay import replay_dead_letters
from consumers.dead_letters.selection import DeadLetterEntry, ProgressCallback, ReplaySummary

__all__ = ["Places", "list_workload_dead_letters", "places", "replay_workload_dead_letters"]

ClientProperties = dict[str, str | int | float | bool]
#: Set by the dead-letter tools themselves, never taken from a spec.
_OWNED = frozenset({"group.id", "bootstrap.servers", *ENGINE_OWNED})


@dataclass(frozen=True)
class Places:
    kind: str
    #: Bootstrap servers or service URL of the dead-letter topic, and its client properties.
    dead_letters: str
    dead_letter_config: ClientProperties
    #: The same for the source topics, where replays are republished.
    source: str
    source_config: ClientProperties


def _client(kind: str, config: ClientProperties) -> ClientProperties:
    if kind == "kafka":
        return {k: v for k, v in config.items() if k not in _OWNED}
    return {k: v for k, v in config.items() if k in PULSAR_CLIENT_OPTIONS}


def places(spec: WorkloadSpec) -> Places:
    source = spec.source
    kind = source.kind
    address = (
        source.bootstrap_servers if isinstance(source, KafkaSourceSpec) else source.service_url
    )
    own = _client(kind, reveal(source.config))
    named = spec.dead_letter.cluster if spec.dead_letter is not None else None
    if named is None or named == source.cluster:
        return Places(kind, address, own, address, own)
    cluster = spec.clusters[named]
    return Places(kind, servers(cluster), _client(kind, reveal(cluster.config)), address, own)


def list_workload_dead_letters(
    spec: WorkloadSpec, limit: int | None = None, since_ms: int | None = None
) -> list[DeadLetterEntry]:
    """The workload's dead letters, read to the end of the topic; nothing is committed."""
    where = places(spec)
    assert spec.dead_letter is not None
    topic = spec.dead_letter.topic
    if where.kind == "kafka":
        return list_dead_letters(
            where.dead_letters,
            topic,
            spec.name,
            limit=limit,
            since_ms=since_ms,
            client_config=where.dead_letter_config,
        )
    from consumers.dead_letters.pulsar_reading import list_pulsar_dead_letters

    return list_pulsar_dead_letters(
        where.dead_letters,
        topic,
        spec.name,
        limit=limit,
        since_ms=since_ms,
        client_options=where.dead_letter_config,
    )


def replay_workload_dead_letters(
    spec: WorkloadSpec,
    to_topic: str | None,
    limit: int | None = None,
    since_ms: int | None = None,
    max_replays: int = 3,
    progress: ProgressCallback | None = None,
) -> ReplaySummary:
    """Republish the workload's dead letters not yet replayed (see ``replay_dead_letters``)."""
    where = places(spec)
    assert spec.dead_letter is not None
    topic = spec.dead_letter.topic
    apart = where.source != where.dead_letters
    if where.kind == "kafka":
        return replay_dead_letters(
            where.dead_letters,
            topic,
            spec.name,
            to_topic,
            limit=limit,
            since_ms=since_ms,
            max_replays=max_replays,
            client_config=where.dead_letter_config,
            progress=progress,
            to_bootstrap=where.source if apart else None,
            to_config=where.source_config if apart else None,
        )
    from consumers.dead_letters.pulsar_replay import replay_pulsar_dead_letters

    return replay_pulsar_dead_letters(
        where.dead_letters,
        topic,
        spec.name,
        to_topic,
        limit=limit,
        since_ms=since_ms,
        max_replays=max_replays,
        client_options=where.dead_letter_config,
        progress=progress,
        to_service_url=where.source if apart else None,
        to_options=where.source_config if apart else None,
    )
