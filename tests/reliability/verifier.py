"""One verifier for every fault the reliability suite injects.

A run is any number of consumer process runs over one topic, each writing the records it handled
to its own file (``tests/support/recording.py``), while :class:`CommitSampler` reads the
group's committed offsets every 100 ms (on Pulsar, :class:`Positions` is sampled between runs:
pulsar-lite admits one client per subscription). :func:`verify` checks the engine's guarantees on all of
it and returns the figures ``docs/reliability.md`` reports:

- every produced record handled at least once (``lost`` = 0);
- per-key order within each process run and assignment (``order_violations`` = 0);
- committed positions never move backwards in any sample (``regressions`` = 0);
- once idle, every partition committed to its log end;
- no partition with lag and no progress for more than the stall bound (``stall``): while the
  sampler's :class:`Watch` is open (from the start, closed by a test while a fault holds
  partitions by design, opened again at the heal), no partition's committed position sits
  below its log end without moving for longer than ``stall_bound`` (45 s unless a test says);
- with a :class:`PermitSampler`, the permits the database has granted to unexpired leases
  (and that those leases report in use) never add up to more than the pool's size.

Duplicates are counted, not failed: a kill -9 replays what was done above the last commit.
"""

from __future__ import annotations

import itertools
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path

from confluent_kafka import Consumer, KafkaException, TopicPartition

from consumers import PermitStoreError
from consumers.permits.store import PermitStore
from tests.support.recording import order_violations, read_run

SAMPLE_SECONDS = 0.1
#: A partition behind its log end whose committed position stays put longer than this (while
#: watched) is stalled: above the engine's own recovery bound (``stall_after``, 30 s), so a
#: partition the engine recovers passes and one nothing recovers fails.
STALL_BOUND = 45.0


class Watch:
    """When the stall check applies: open spans of monotonic time. A sampler's watch opens when
    sampling starts; a test closes it while a fault holds partitions by design (a link cut)
    and opens it again at the heal, so a stall is measured from the heal."""

    def __init__(self, clock: Callable[[], float] = time.monotonic) -> None:
        self.spans: list[tuple[float, float]] = []
        self._opened: float | None = None
        self._clock = clock

    def open(self) -> None:
        if self._opened is None:
            self._opened = self._clock()

    def close(self) -> None:
        if self._opened is not None:
            self.spans.append((self._opened, self._clock()))
            self._opened = None

    @contextmanager
    def fault(self) -> Iterator[None]:
        """Closed inside the block: the fault's own window is not a stall."""
        self.close()
        try:
            yield
        finally:
            self.open()

    def until(self, end: float) -> list[tuple[float, float]]:
        """The spans, the one still open ending at ``end``."""
        return self.spans + ([(self._opened, end)] if self._opened is not None else [])


class Positions:
    """Every partition's sequence of distinct committed positions, sample by sample, and when
    each was first seen (for the stall check; only a sampler that samples all along opens its
    :attr:`watch`: Pulsar's positions, sampled between runs, are not checked for stalls)."""

    def __init__(self, partitions: int, clock: Callable[[], float] = time.monotonic) -> None:
        self.history: dict[int, list[int]] = {p: [] for p in range(partitions)}
        #: Per partition: (monotonic time, position) at each change; no commit yet counts as 0.
        self.timeline: dict[int, list[tuple[float, int]]] = {p: [] for p in range(partitions)}
        self.samples = 0
        self.last_sample = 0.0
        self.watch = Watch(clock)
        self._clock = clock

    def add(self, found: dict[int, int]) -> None:
        """One sample: each partition's committed position (negative: none yet)."""
        now = self._clock()
        self.samples += 1
        for partition, offset in found.items():
            seen = self.history[partition]
            if offset >= 0 and (not seen or seen[-1] != offset):
                seen.append(offset)
            line = self.timeline[partition]
            if not line or line[-1][1] != max(offset, 0):
                line.append((now, max(offset, 0)))
        self.last_sample = now

    def latest(self) -> dict[int, int]:
        """Each partition's newest committed position (0 before the first commit)."""
        return {p: line[-1][1] for p, line in self.timeline.items() if line}

    def longest_stall(self, ends: dict[int, int], since: float = 0.0) -> tuple[float, int] | None:
        """(seconds, partition) of the longest watched time (from ``since``, a monotonic time)
        a partition's committed position sat below its end (``ends``: constant while sampled,
        the topics filled before the runs) without moving; ``None`` when nothing was watched."""
        spans = [
            (max(opened, since), closed)
            for opened, closed in self.watch.until(self.last_sample)
            if closed > since
        ]
        if not spans:
            return None
        longest = (0.0, -1)
        for partition, line in self.timeline.items():
            changes = list(line)
            bounds = [t for t, _ in changes[1:]] + [self.last_sample]
            for (start, position), stop in zip(changes, bounds, strict=True):
                if position >= ends.get(partition, 0):
                    continue
                for opened, closed in spans:
                    held = min(stop, closed) - max(start, opened)
                    if held > longest[0]:
                        longest = (held, partition)
        return longest

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
        self.watch.open()
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


class PermitSampler:
    """Reads a shared permit pool's leases every 100 ms on a thread, as the store defines them
    (:meth:`PermitStore.status`: a lease is live until its ``expires_at`` on the database's
    clock), and keeps the most permits unexpired leases were granted, and reported in use, at
    any one sample. An unreachable database is no sample."""

    def __init__(self, url: str, pool: str) -> None:
        self.pool = pool
        self.size = 0
        self.samples = 0
        self.max_granted = 0
        self.max_in_use = 0
        #: Samples whose live grants (or uses) added up to more than the pool.
        self.over: list[tuple[int, int, int]] = []
        #: Each holder's grant and seconds to expiry in the newest sample.
        self.latest: dict[str, tuple[int, float]] = {}
        self._store = PermitStore(url)
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="permit-sampler", daemon=True)

    def __enter__(self) -> PermitSampler:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join(timeout=10)
        self._store.close()

    def _run(self) -> None:
        while not self._stop.wait(SAMPLE_SECONDS):
            try:
                pools = {p.pool: p for p in self._store.status()}
            except PermitStoreError:
                continue
            status = pools.get(self.pool)
            if status is None:
                continue  # not declared yet
            live = status.live()
            granted = sum(lease.granted for lease in live)
            in_use = sum(lease.in_use for lease in live)
            self.size = status.size
            self.samples += 1
            self.max_granted = max(self.max_granted, granted)
            self.max_in_use = max(self.max_in_use, in_use)
            if max(granted, in_use) > status.size:
                self.over.append((granted, in_use, status.size))
            self.latest = {
                lease.holder: (lease.granted, lease.expires_in) for lease in status.leases
            }


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
    #: Longest watched time a partition had lag and no progress (None: not sampled all along).
    stall: float | None = None
    stall_partition: int = -1
    stall_bound: float = STALL_BOUND
    #: With a PermitSampler: the most permits live leases were granted, and reported in use,
    #: at once, against the pool's size.
    permits_granted: int | None = None
    permits_in_use: int | None = None
    pool: int | None = None
    permit_samples: int = 0
    over_issued: int = 0

    @property
    def ok(self) -> bool:
        return (
            self.lost == 0
            and self.order_violations == 0
            and not self.regressions
            and self.committed == self.ends
            and (self.stall is None or self.stall <= self.stall_bound)
            and self.over_issued == 0
        )

    def line(self, fault: str) -> str:
        """One row of the figures printed at the end of each test (docs/reliability.md)."""
        stall = "n/a" if self.stall is None else f"{self.stall:.1f}s"
        permits = (
            ""
            if self.pool is None
            else f" permits_granted_max={self.permits_granted}/{self.pool} "
            f"permits_in_use_max={self.permits_in_use}/{self.pool} "
            f"permit_samples={self.permit_samples} over_issued={self.over_issued}"
        )
        return (
            f"RELIABILITY {fault}: records={self.records} runs={self.runs} "
            f"handled={self.handled} duplicates={self.duplicates} lost={self.lost} "
            f"order_violations={self.order_violations} regressions={len(self.regressions)} "
            f"samples={self.samples} committed_is_end={self.committed == self.ends} "
            f"longest_stall={stall}{permits}"
        )


def verify(
    records: set[tuple[str, int]],
    runs: list[Path],
    sampler: Positions,
    committed: dict[int, int],
    ends: dict[int, int],
    *,
    stall_bound: float = STALL_BOUND,
    permits: PermitSampler | None = None,
) -> Verdict:
    """Check ``runs`` against the ``(key, seq)`` pairs produced; see the module docstring."""
    verdict = Verdict(records=len(records), runs=len(runs), samples=sampler.samples)
    stall = sampler.longest_stall(ends)
    if stall is not None:
        verdict.stall, verdict.stall_partition = stall
    verdict.stall_bound = stall_bound
    if permits is not None:
        verdict.pool = permits.size
        verdict.permits_granted = permits.max_granted
        verdict.permits_in_use = permits.max_in_use
        verdict.permit_samples = permits.samples
        verdict.over_issued = len(permits.over)
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
