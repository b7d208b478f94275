"""One verifier for every fault the reliability suite injects.

A run is any number of consumer process runs over one topic, each writing the records it handled
to its own file (``tests/integration/recording.py``), while :class:`CommitSampler` reads the
group's committed offsets every 100 ms (on Pulsar, :class:`Positions` is sampled between runs:
pulsar-lite admits one client per subscription). :func:`verify` checks the engine's guarantees on all of
it and returns the figures ``docs/reliability.md`` reports:

- every produced record handled at least once (``lost`` = 0);
- per-key order within each process run and assignment (``order_violations`` = 0);
- committed positions never move backwards in any sample (``regressions`` = 0);
- once idle, every partition committed to its log end.

Duplicates are counted, not failed: a kill -9 replays what was done above the last commit.
"""

from __future__ import annotations

import itertools
import threading
from dataclasses import dataclass, field
from pathlib import Path

from confluent_kafka import Consumer, KafkaException, TopicPartition

from tests.integration.recording import order_violations, read_run

SAMPLE_SECONDS = 0.1


class Positions:
    """Every partition's sequence of distinct committed positions, sample by sample."""

    def __init__(self, partitions: int) -> None:
        self.history: dict[int, list[int]] = {p: [] for p in range(partitions)}
        self.samples = 0

    def add(self, found: dict[int, int]) -> None:
        """One sample: each partition's committed position (negative: none yet)."""
        self.samples += 1
        for partition, offset in found.items():
            seen = self.history[partition]
            if offset >= 0 and (not seen or seen[-1] != offset):
                seen.append(offset)

    def regressions(self) -> list[tuple[int, int, int]]:
        """(partition, from, to) for every sample lower than the one before it."""
        return [
            (p, before, after)
            for p, seen in self.history.items()
            for before, after in itertools.pairwise(seen)
            if after < before
        ]


class CommitSampler(Positions):
    """Reads a group's committed offsets every 100 ms on a thread (an offset fetch, which does
    not join the group)."""

    def __init__(self, bootstrap: str, group: str, topic: str, partitions: int) -> None:
        super().__init__(partitions)
        self._client = Consumer({"bootstrap.servers": bootstrap, "group.id": group})
        self._parts = [TopicPartition(topic, p) for p in range(partitions)]
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="commit-sampler", daemon=True)

    def __enter__(self) -> CommitSampler:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join(timeout=10)
        self._client.close()

    def _run(self) -> None:
        while not self._stop.wait(SAMPLE_SECONDS):
            try:
                found = self._client.committed(self._parts, timeout=5)
            except KafkaException:
                continue  # the broker frozen or away: no sample, not a regression
            self.add({tp.partition: tp.offset for tp in found})


@dataclass
class Verdict:
    records: int
    runs: int
    handled: int = 0
    duplicates: int = 0
    lost: int = 0
    order_violations: int = 0
    regressions: list[tuple[int, int, int]] = field(default_factory=list)
    committed: dict[int, int] = field(default_factory=dict)
    ends: dict[int, int] = field(default_factory=dict)
    samples: int = 0

    @property
    def ok(self) -> bool:
        return (
            self.lost == 0
            and self.order_violations == 0
            and not self.regressions
            and self.committed == self.ends
        )

    def line(self, fault: str) -> str:
        """One row of the figures printed at the end of each test (docs/reliability.md)."""
        return (
            f"RELIABILITY {fault}: records={self.records} runs={self.runs} "
            f"handled={self.handled} duplicates={self.duplicates} lost={self.lost} "
            f"order_violations={self.order_violations} regressions={len(self.regressions)} "
            f"samples={self.samples} committed_is_end={self.committed == self.ends}"
        )


def verify(
    records: set[tuple[str, int]],
    runs: list[Path],
    sampler: Positions,
    committed: dict[int, int],
    ends: dict[int, int],
) -> Verdict:
    """Check ``runs`` against the ``(key, seq)`` pairs produced; see the module docstring."""
    verdict = Verdict(records=len(records), runs=len(runs), samples=sampler.samples)
    seen: set[tuple[str, int]] = set()
    for run in runs:
        rows = read_run(str(run))
        verdict.handled += len(rows)
        verdict.order_violations += len(order_violations(rows))
        seen.update((key, seq) for key, seq, *_ in rows)
    verdict.lost = len(records - seen)
    verdict.duplicates = verdict.handled - len(seen & records)
    verdict.regressions = sampler.regressions()
    verdict.committed = committed
    verdict.ends = ends
    return verdict
