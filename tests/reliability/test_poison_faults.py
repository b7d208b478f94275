"""Poison and hangs, for each way a handler runs, checked by the suite's one verifier
(``verifier.py``) on a real broker (Tansu): a key whose first record always fails, one whose
first record never returns and one whose first record raises ``SystemExit``, a clean stop
(SIGTERM) while records flow, then a run to idleness.
"""

from __future__ import annotations

import json
import signal
import time
from pathlib import Path

import pytest

from consumers.dev.embedded.tansu import TansuBroker
from tests.backends import TansuBackend
from tests.helpers import wait_until
from tests.reliability.faults import fill, finish_and_verify
from tests.reliability.verifier import CommitSampler
from tests.support.processes import lines, start_consumer, write_spec

pytestmark = pytest.mark.reliability

PARTITIONS = 4
KEYS = 100
RECORDS = 4_000
#: The records the handler never completes (``tests.support.recording._bad``).
BAD = {("k0", 0), ("k1", 0), ("k2", 0)}
DRAIN = 2.0
EXECUTORS = {
    "async": ("poison_or_hang", "", 0.005),
    "thread": ("poison_or_hang_sync", "executor: thread\n", 0.001),
    "process": ("poison_or_hang_sync", "executor: process\nprocesses: 2\n", 0.001),
}


@pytest.mark.parametrize("executor", sorted(EXECUTORS))
def test_poison_and_hangs_settle_and_a_clean_stop_keeps_its_deadline(
    executor: str, kafka_broker: TansuBroker, topic_factory, tmp_path: Path
) -> None:
    """The poison and the hang each take two attempts (the hang's end at the 500 ms timeout)
    and go to the dead-letter topic; their keys' later records wait behind them; a SIGTERM
    while records flow stops the process within the drain deadline; nothing else is lost."""
    handler, how, delay = EXECUTORS[executor]
    topic, dlq = topic_factory(PARTITIONS), topic_factory(1)
    records = fill(kafka_broker, topic, RECORDS, KEYS, PARTITIONS)
    group = f"g-poison-{executor}"
    outcomes = (
        "timeout: 500ms\n"
        "retries: {max_attempts: 2, backoff: 100ms, jitter: false}\n"
        f"dead_letter: {{topic: {dlq}, max_ratio: 0.5}}\n"
    )
    spec = write_spec(
        tmp_path / "spec.yaml",
        kafka_broker,
        topic,
        group,
        concurrency=50,
        handler=handler,
        extra=how + outcomes,
        drain_timeout=f"{DRAIN:.0f}s",
    )
    run = tmp_path / "run0.txt"
    with CommitSampler(kafka_broker.bootstrap, group, topic, PARTITIONS) as sampler:
        proc = start_consumer(spec, run, delay)
        wait_until(lambda: lines(run) >= RECORDS // 3, timeout=120, message="progress")
        asked = time.monotonic()
        proc.send_signal(signal.SIGTERM)
        proc.wait(timeout=60)
        stopped = time.monotonic() - asked
        assert proc.returncode == 0, proc.stdout.read().decode()[-3000:] if proc.stdout else ""
        verdict = finish_and_verify(
            kafka_broker, spec, topic, group, PARTITIONS, [run], sampler, records - BAD
        )
    dead = [
        json.loads(stored.value or b"")
        for part in TansuBackend(kafka_broker).read(dlq, 1)
        for stored in part
    ]
    print(
        verdict.line(
            f"poison and a hang, executor {executor}: dead-lettered {len(dead)}, "
            f"SIGTERM to exit {stopped:.1f}s (drain {DRAIN:.0f}s)"
        )
    )
    assert {(d["key"], d["seq"]) for d in dead} == BAD, dead
    assert stopped < DRAIN + 5, f"the clean stop took {stopped:.1f}s"
    assert verdict.ok, verdict
