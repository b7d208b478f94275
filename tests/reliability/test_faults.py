"""Faults injected into real consumer processes on a real broker (Tansu), every run checked by
one verifier (``verifier.py``): nothing lost, key order within each run, committed positions
never moving backwards in 100 ms samples, committed = log end once idle. Each test prints its
figures as a ``RELIABILITY`` line (``docs/reliability.md``); ``LH_SOAK=1`` runs the long variant.
"""

from __future__ import annotations

import os
import random
import signal
import time
from pathlib import Path

import pytest

from consumers.dev.embedded.tansu import TansuBroker
from consumers.dev.sample import produce_sample
from tests.helpers import wait_until
from tests.integration.processes import lines, start_consumer, write_spec
from tests.reliability.faults import (
    EXECUTORS,
    SOAK,
    finish_and_verify,
    kill,
    produced,
)
from tests.reliability.verifier import CommitSampler

pytestmark = pytest.mark.reliability

PARTITIONS = 4
KEYS = 200
KILLS = 20 if SOAK else 5


@pytest.mark.parametrize("executor", sorted(EXECUTORS))
def test_kill_9_at_random_instants_loses_nothing(
    executor: str, kafka_broker: TansuBroker, topic_factory, tmp_path: Path
) -> None:
    """``kill -9`` of the consumer again and again, each time after a random number of records
    (from none: mid group join, to a fifth of the topic), then one run to idleness."""
    how = EXECUTORS[executor]
    topic = topic_factory(PARTITIONS)
    produce_sample(kafka_broker.bootstrap, topic, how.records, KEYS)
    records = produced(kafka_broker, topic, PARTITIONS)
    group = f"g-kill-{executor}"
    spec = write_spec(
        tmp_path / "spec.yaml",
        kafka_broker,
        topic,
        group,
        concurrency=50,
        handler=how.handler,
        extra=how.spec,
    )
    rng = random.Random(f"{executor}-{os.environ.get('LH_SEED', '0')}")
    runs: list[Path] = []
    with CommitSampler(kafka_broker.bootstrap, group, topic, PARTITIONS) as sampler:
        for i in range(KILLS):
            run = tmp_path / f"run{i}.txt"
            runs.append(run)
            proc = start_consumer(spec, run, how.delay)
            target = rng.randint(0, how.records // 5)
            wait_until(
                lambda run=run, target=target, proc=proc: (  # type: ignore[misc]
                    lines(run) >= target or proc.poll() is not None
                ),
                timeout=120,
                message=f"run {i} handled {target} records",
            )
            assert proc.poll() is None, "the consumer exited before it was killed"
            kill(proc)
        verdict = finish_and_verify(
            kafka_broker, spec, topic, group, PARTITIONS, runs, sampler, records
        )
    print(verdict.line(f"kill -9 x{KILLS}, executor {executor}"))
    assert verdict.ok, verdict


def test_a_frozen_broker_stalls_and_then_resumes_without_loss(
    kafka_broker: TansuBroker, topic_factory, tmp_path: Path
) -> None:
    """The broker stopped (SIGSTOP) mid-run for longer than the session timeout, then resumed:
    the consumer rides it out in place, nothing is lost, order and commits hold."""
    freeze = 30.0 if SOAK else 6.0
    how = EXECUTORS["async"]
    topic = topic_factory(PARTITIONS)
    produce_sample(kafka_broker.bootstrap, topic, how.records, KEYS)
    records = produced(kafka_broker, topic, PARTITIONS)
    group = "g-freeze"
    spec = write_spec(tmp_path / "spec.yaml", kafka_broker, topic, group, concurrency=50)
    run = tmp_path / "run.txt"
    with CommitSampler(kafka_broker.bootstrap, group, topic, PARTITIONS) as sampler:
        proc = start_consumer(spec, run, 0.05)  # ~2,000 records/s: most are left at the freeze
        wait_until(lambda: lines(run) >= how.records // 4, timeout=120, message="progress")
        os.kill(kafka_broker.pid, signal.SIGSTOP)
        try:
            time.sleep(freeze)  # the outage itself: its length is the fault, not a wait
        finally:
            os.kill(kafka_broker.pid, signal.SIGCONT)
        resumed, before = time.monotonic(), lines(run)
        assert before < how.records, "every record was handled before the broker froze"
        wait_until(lambda: lines(run) > before, timeout=120, message="progress after resume")
        recovery = time.monotonic() - resumed
        proc.send_signal(signal.SIGTERM)  # a clean stop: drain and commit
        proc.wait(timeout=60)
        verdict = finish_and_verify(
            kafka_broker, spec, topic, group, PARTITIONS, [run], sampler, records
        )
    print(verdict.line(f"broker frozen {freeze:.0f}s, recovered in {recovery:.1f}s"))
    assert verdict.ok, verdict
