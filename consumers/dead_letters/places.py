"""A workload's dead letters by its spec, on either broker: where they are read (the dead-letter
topic's cluster, its own when ``dead_letter.cluster`` names another) and where replays go (the
source's cluster). The command line and the scheduled replay job both come through here."""

from __future__ import annotations

from dataclasses import dataclass

from consumers.backends.admin import DeadLetterStore
from consumers.config.clusters import servers
from consumers.config.pulsar_options import CLIENT_OPTIONS as PULSAR_CLIENT_OPTIONS
from consumers.config.sources import KafkaSourceSpec, reveal
from consumers.config.spec import WorkloadSpec
from consumers.dead_letters.listing import list_dead_letters
from consumers.dead_letters.replay import replay_dead_letters
from consumers.dead_letters.selection import DeadLetterEntry, ProgressCallback, ReplaySummary

__all__ = [
    "DeadLetterPlaces",
    "dead_letter_places",
    "list_workload_dead_letters",
    "replay_workload_dead_letters",
]

ClientProperties = dict[str, str | int | float | bool]


@dataclass(frozen=True)
class DeadLetterPlaces:
    """Where a workload's dead-letter topic is, and where its replays are republished."""

    topic: str
    dead_letters: DeadLetterStore
    #: ``None`` when replays go to the dead-letter topic's own cluster.
    source: DeadLetterStore | None


def _store(kind: str, address: str, config: ClientProperties) -> DeadLetterStore:
    if kind == "kafka":
        from consumers.backends.kafka.dead_letters import KafkaDeadLetters

        return KafkaDeadLetters(address, config)
    from consumers.backends.pulsar.dead_letters import PulsarDeadLetters  # loads pulsar-client

    options = {k: v for k, v in config.items() if k in PULSAR_CLIENT_OPTIONS}
    return PulsarDeadLetters(address, options)


def dead_letter_places(spec: WorkloadSpec) -> DeadLetterPlaces:
    """The stores of ``spec``'s dead letters and of its source; a workload without
    ``dead_letter`` raises ``ValueError`` (the CLI and the replay job check before)."""
    if spec.dead_letter is None:
        raise ValueError(f"workload {spec.name!r} has no dead_letter topic")
    source = spec.source
    kind = source.kind
    address = (
        source.bootstrap_servers if isinstance(source, KafkaSourceSpec) else source.service_url
    )
    own = reveal(source.config)
    named = spec.dead_letter.cluster
    if named is None or named == source.cluster:
        return DeadLetterPlaces(spec.dead_letter.topic, _store(kind, address, own), None)
    cluster = spec.clusters[named]
    return DeadLetterPlaces(
        spec.dead_letter.topic,
        _store(kind, servers(cluster), reveal(cluster.config)),
        _store(kind, address, own),
    )


def list_workload_dead_letters(
    spec: WorkloadSpec, limit: int | None = None, since_ms: int | None = None
) -> list[DeadLetterEntry]:
    """The workload's dead letters, read to the end of the topic; nothing is acknowledged."""
    places = dead_letter_places(spec)
    return list_dead_letters(places.dead_letters, places.topic, spec.name, limit, since_ms)


def replay_workload_dead_letters(
    spec: WorkloadSpec,
    to_topic: str | None,
    limit: int | None = None,
    since_ms: int | None = None,
    max_replays: int = 3,
    progress: ProgressCallback | None = None,
) -> ReplaySummary:
    """Republish the workload's dead letters not yet replayed (see ``replay_dead_letters``)."""
    places = dead_letter_places(spec)
    return replay_dead_letters(
        places.dead_letters,
        places.topic,
        spec.name,
        to_topic,
        limit,
        since_ms,
        max_replays,
        progress=progress,
        target=places.source,
    )
