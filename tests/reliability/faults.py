"""What the fault tests share: how big a run is (``LH_SOAK=1`` for the long variant), the
records a topic holds, and one consumer process run after another against one verifier."""

from __future__ import annotations

import json
import os
from dataclasses import dataclass
from pathlib import Path

from consumers.backends.kafka.consumer import committed_offsets, log_end_offsets
from consumers.dev.embedded.tansu import TansuBroker
from consumers.dev.sample import produce_sample
from tests.backends import TansuBackend
from tests.helpers import wait_until
from tests.reliability.verifier import CommitSampler, Verdict, verify
from tests.support.processes import finish, lines, start_consumer

#: The long variant (``LH_SOAK=1 make test PYTEST_ARGS=tests/reliability``): more records, more
#: faults, longer outages.
SOAK = os.environ.get("LH_SOAK") == "1"


@dataclass(frozen=True)
class Executor:
    """One way a handler runs, as a spec says it and as the recording handler does it."""

    handler: str
    spec: str
    delay: float
    records: int


EXECUTORS = {
    "async": Executor("record", "", 0.005, 100_000 if SOAK else 20_000),
    "auto": Executor("record_sync", "", 0.0002, 100_000 if SOAK else 20_000),
    "thread": Executor("record_sync", "executor: thread\n", 0.0002, 100_000 if SOAK else 20_000),
    "process": Executor(
        "record_sync", "executor: process\nprocesses: 2\n", 0.0005, 40_000 if SOAK else 8_000
    ),
}


def produced(broker: TansuBroker, topic: str, partitions: int) -> set[tuple[str, int]]:
    """The ``(key, seq)`` of every record in ``topic``, read back from the broker."""
    return {
        (value["key"], value["seq"])
        for part in TansuBackend(broker).read(topic, partitions)
        for stored in part
        if stored.value is not None and (value := json.loads(stored.value))
    }


def kill_after(spec: Path, run: Path, delay: float, target: int) -> None:
    """A consumer run of ``spec`` that handles ``target`` records (``run`` records them), then
    ``kill -9``: no drain, no final commit or acknowledgement."""
    proc = start_consumer(spec, run, delay)
    wait_until(
        lambda: lines(run) >= target or proc.poll() is not None,
        timeout=120,
        message=f"{run.name} handled {target} records",
    )
    assert proc.poll() is None, "the consumer exited before it was killed"
    proc.kill()
    proc.wait(timeout=30)


def fill(
    broker: TansuBroker, topic: str, count: int, keys: int, partitions: int, key_prefix: str = "k"
) -> set[tuple[str, int]]:
    """Write ``count`` records over ``keys`` keys to ``topic``; the ``(key, seq)`` of every
    record it then holds, read back (:func:`produced`)."""
    produce_sample(broker.bootstrap, topic, count, keys, key_prefix=key_prefix)
    return produced(broker, topic, partitions)


def finish_and_verify(
    broker: TansuBroker,
    spec: Path,
    topic: str,
    group: str,
    partitions: int,
    runs: list[Path],
    sampler: CommitSampler,
    records: set[tuple[str, int]],
    env: dict[str, str] | None = None,
) -> Verdict:
    """One last run to idleness (``env``: added to its environment), then :func:`verify` over
    every run."""
    final = runs[0].with_name("final.txt")
    runs.append(final)
    # INFO: assignments and revokes, shown only if the run fails.
    command = ("--until-idle", "2", "--log-level", "INFO")
    finish(start_consumer(spec, final, 0.0, *command, env=env))
    committed = committed_offsets(broker.bootstrap, group, topic, partitions)
    ends = log_end_offsets(broker.bootstrap, topic, partitions)
    return verify(records, runs, sampler, committed, ends)
