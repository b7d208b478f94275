"""A workload's engine settings: what the runner, its lanes, commits and executors are told
(built from a validated spec by :func:`consumers.service.launch.settings_from_spec`)."""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Literal

from consumers.engine.lanes import Ordering
from consumers.engine.resolution import DeadLetterPolicy, RetryPolicy
from consumers.execution.executors import MAX_HANDOFF_BYTES, Executor
from consumers.landing.sink import LandingSettings


@dataclass(frozen=True)
class RunnerSettings:
    name: str
    ordering: Ordering = "key"
    virtual_partitions: int = 0
    concurrency: int = 100
    weight: float = 1.0
    timeout: float = 30.0
    #: Records per partition before it pauses; None: :func:`default_max_buffered`.
    max_buffered: int | None = None
    commit_interval: float = 1.0
    commit_every: int = 10_000
    drain_timeout: float = 30.0
    #: Seconds a partition with records behind it may deliver nothing before it is recovered.
    stall_after: float = 30.0
    mode: Literal["single", "batch", "unique"] = "single"
    batch_size: int = 500
    batch_max_wait: float = 2.0
    retry: RetryPolicy = field(default_factory=RetryPolicy)
    dead_letter: DeadLetterPolicy | None = None
    output_topic: str | None = None
    landing: LandingSettings | None = None
    executor: Executor = "auto"
    #: Worker processes for ``executor: process`` (0: one per CPU).
    processes: int = 0
    max_handoff_bytes: int = MAX_HANDOFF_BYTES
    #: Where partitions held by this process are marked, so a handler that ends the process
    #: is isolated (:mod:`consumers.engine.crashes`); None: not isolated.
    crash_dir: Path | None = None

    @property
    def buffer_limit(self) -> int:
        if self.max_buffered is not None:
            return self.max_buffered
        return default_max_buffered(self.concurrency)


def default_max_buffered(concurrency: int) -> int:
    """A partition's buffer by default: 10,000 records, or 40 per permit above 250.

    A pause makes the client drop its prefetched records, and the first batch after the resume
    arrives 0.2-0.7 s later; the records left in the buffer (half of it) must cover that gap at
    the workload's full rate, which grows with its concurrency (docs/benchmarks.md)."""
    return max(10_000, 40 * concurrency)
