"""One topic landed twice: enabled workloads that land the same topic of the same cluster into
the same dataset, found across the specs read together (a directory; they share the lake,
a platform setting).

Each workload consumes the topic in its own group, so every record lands once per workload and
the dataset silently holds it twice. On Kafka it is worse than duplicates: a partition's files
are named by topic, partition and first offset, not by workload, so the two write the same
names over each other, and a restart of one removes or cuts back files the other landed and
committed. Hence the rule, in one place for ``lanehouse validate``/``consume``
(:func:`consumers.config.spec.load_specs`) and the discovery sensor
(:mod:`orchestration.workloads.registry`): such a pair is refused, naming both files, unless
both set ``landing.allow_overlap: true``, which only a Pulsar source may (its files carry a
digest of their positions and are never removed by another reader: only duplicates, which the
cleaning step drops by lineage key).

Clusters are compared by their servers as written (kind, then any ``host:port`` in common): two
spellings of one broker (``localhost`` and ``127.0.0.1``) are not recognised.
"""

from __future__ import annotations

import itertools
import re
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Protocol

from consumers.config.sections import LandingSpec
from consumers.config.sources import KafkaSourceSpec, PulsarSourceSpec
from consumers.errors import SpecError

__all__ = [
    "LandingOverlap",
    "LandingWorkload",
    "check_overlaps",
    "landing_overlaps",
    "option_problem",
    "reasons_by_file",
]

_DEFAULT_PORTS = {"kafka": "9092", "pulsar": "6650", "pulsar+ssl": "6651"}
_PULSAR_PARTITION = re.compile(r"-partition-\d+$")


class LandingWorkload(Protocol):
    """What the rule reads of a spec: a :class:`~consumers.config.spec.WorkloadSpec` (a protocol
    because that module imports this one)."""

    @property
    def name(self) -> str: ...
    @property
    def enabled(self) -> bool: ...
    @property
    def source(self) -> KafkaSourceSpec | PulsarSourceSpec: ...
    @property
    def landing(self) -> LandingSpec | None: ...


@dataclass(frozen=True)
class LandingOverlap:
    """Two enabled workloads that would land ``topics`` of one cluster into ``dataset``."""

    files: tuple[str, str]
    names: tuple[str, str]
    topics: tuple[str, ...]
    dataset: str
    kind: str
    #: The first file's servers, as written.
    servers: str
    #: Whether each file sets ``landing.allow_overlap``.
    opted_in: tuple[bool, bool]

    def reason(self, file: str) -> str:
        """Why ``file`` (one of :attr:`files`) is refused, naming the other file."""
        me = self.files.index(file)
        other = 1 - me
        text = (
            f"workload {self.names[me]!r} and workload {self.names[other]!r} "
            f"({self.files[other]}) both land {_topics(self.topics)} of {self.kind} "
            f"{self.servers} into dataset {self.dataset!r}: every record would land twice"
        )
        if self.kind == "kafka":
            text += (
                ", and both would write the same file names (a restart of one removes files "
                "the other landed). Land it from one workload, or into two datasets"
            )
        elif any(self.opted_in):
            only = self.files[0 if self.opted_in[0] else 1]
            text += (
                f". landing.allow_overlap is true only in {only}: set it in both files to "
                "do this on purpose"
            )
        else:
            text += (
                ". Land it from one workload or into two datasets, or set "
                "landing.allow_overlap: true in both files to do this on purpose"
            )
        return text + " (until then neither is started; one already running is left as it is)"

    def __str__(self) -> str:
        return (
            f"{self.files[0]} and {self.files[1]} both land {_topics(self.topics)} into "
            f"dataset {self.dataset!r}"
        )


def landing_overlaps(workloads: Iterable[tuple[str, LandingWorkload]]) -> list[LandingOverlap]:
    """Every pair of enabled ``(file, spec)`` landing a topic of one cluster into one dataset
    whose specs do not both allow it, in the order of ``workloads``."""
    by_dataset: dict[str, list[tuple[str, LandingWorkload, LandingSpec]]] = {}
    for file, spec in workloads:
        if spec.enabled and spec.landing is not None:
            by_dataset.setdefault(spec.landing.dataset, []).append((file, spec, spec.landing))
    overlaps: list[LandingOverlap] = []
    for dataset, landers in by_dataset.items():
        for (file_a, a, land_a), (file_b, b, land_b) in itertools.combinations(landers, 2):
            opted_in = (land_a.allow_overlap, land_b.allow_overlap)
            topics = _shared_topics(a.source, b.source)
            if not topics or all(opted_in):
                continue
            overlaps.append(
                LandingOverlap(
                    files=(file_a, file_b),
                    names=(a.name, b.name),
                    topics=topics,
                    dataset=dataset,
                    kind=a.source.kind,
                    servers=_servers_text(a.source),
                    opted_in=opted_in,
                )
            )
    return overlaps


def reasons_by_file(overlaps: Iterable[LandingOverlap]) -> dict[str, str]:
    """Each file in an overlap and why it is refused (every overlap it is in)."""
    reasons: dict[str, list[str]] = {}
    for overlap in overlaps:
        for file in overlap.files:
            reasons.setdefault(file, []).append(overlap.reason(file))
    return {file: "; ".join(texts) for file, texts in reasons.items()}


def check_overlaps(workloads: Iterable[tuple[str, LandingWorkload]]) -> None:
    """Raise a :class:`SpecError` (field ``landing``) for the first overlap, on its later file."""
    for overlap in landing_overlaps(workloads):
        file = overlap.files[1]
        raise SpecError(file, "landing", overlap.reason(file))


def option_problem(source: KafkaSourceSpec | PulsarSourceSpec, landing: LandingSpec) -> str | None:
    """Why ``landing.allow_overlap`` cannot be set on this source (None: it can)."""
    if not landing.allow_overlap or source.kind == "pulsar":
        return None
    return (
        "landing.allow_overlap: only a Pulsar source may land a topic another workload lands "
        "too: two Kafka workloads write a partition's files under the same names and a restart "
        "of one removes files the other landed; land into a second dataset instead"
    )


def _shared_topics(
    a: KafkaSourceSpec | PulsarSourceSpec, b: KafkaSourceSpec | PulsarSourceSpec
) -> tuple[str, ...]:
    """``a``'s topics that ``b`` reads too, when both read one cluster."""
    if a.kind != b.kind or not _servers(a) & _servers(b):
        return ()
    return tuple(t for t in a.topics if any(_same_topic(a.kind, t, u) for u in b.topics))


def _same_topic(kind: str, a: str, b: str) -> bool:
    """Equal names; on Pulsar also a partitioned topic and one of its partitions (two
    partitions of one topic are not the same topic)."""
    if a == b:
        return True
    if kind != "pulsar":
        return False
    return _PULSAR_PARTITION.sub("", a) == b or a == _PULSAR_PARTITION.sub("", b)


def _servers_text(source: KafkaSourceSpec | PulsarSourceSpec) -> str:
    return source.bootstrap_servers if isinstance(source, KafkaSourceSpec) else source.service_url


def _servers(source: KafkaSourceSpec | PulsarSourceSpec) -> frozenset[str]:
    """Lowercase ``host:port`` of each server, the kind's default port filled in."""
    text = _servers_text(source).strip().lower()
    scheme, sep, _ = text.partition("://")
    port = _DEFAULT_PORTS.get(scheme if sep else source.kind, _DEFAULT_PORTS[source.kind])
    hosts: set[str] = set()
    for entry in text.split(","):
        host = entry.strip().split("://", 1)[-1].rstrip("/")
        if host:
            has_port = ":" in host and not host.endswith("]")
            hosts.add(host if has_port else f"{host}:{port}")
    return frozenset(hosts)


def _topics(topics: tuple[str, ...]) -> str:
    quoted = ", ".join(repr(topic) for topic in topics)
    return f"topic {quoted}" if len(topics) == 1 else f"topics {quoted}"
