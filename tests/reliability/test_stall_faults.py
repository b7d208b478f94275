"""A member paused for backpressure through a rebalance (issue: librdkafka keeps a partition's
paused flag across a revoke and the next assignment): a second member joins, handles a few
hundred records and leaves cleanly, and the first must read all its partitions to the end,
without the liveness watch having to step in."""

from __future__ import annotations

import signal
import time
from pathlib import Path

import pytest

from consumers.backends.kafka.consumer import committed_offsets, log_end_offsets
from consumers.dev.embedded.tansu import TansuBroker
from tests.helpers import wait_until
from tests.reliability.faults import fill, finish_and_verify
from tests.reliability.verifier import CommitSampler
from tests.support.processes import finish, lines, start_consumer, write_spec

pytestmark = pytest.mark.reliability

PARTITIONS = 6
KEYS = 200
RECORDS = 15_000
#: A plain def of up to 10 ms, five at a time: about 1,000 records a second, so the 300-record
#: buffers stay full (paused) for the whole run. The liveness watch waits past the verifier's
#: stall bound (45 s): the assignment alone must leave no partition paused.
HOW = "max_buffered: 300\nstall_after: 60s\n"


def test_a_member_paused_for_backpressure_reads_to_the_end_after_a_rebalance(
    kafka_broker: TansuBroker, topic_factory, tmp_path: Path
) -> None:
    topic = topic_factory(PARTITIONS)
    records = fill(kafka_broker, topic, RECORDS, KEYS, PARTITIONS)
    group = "g-stall-repaused"
    spec = write_spec(
        tmp_path / "spec.yaml", kafka_broker, topic, group, 5, "record_blocking", extra=HOW
    )
    first, second = tmp_path / "first.txt", tmp_path / "second.txt"

    def committed() -> dict[int, int]:
        return committed_offsets(kafka_broker.bootstrap, group, topic, PARTITIONS)

    ends = log_end_offsets(kafka_broker.bootstrap, topic, PARTITIONS)
    a = start_consumer(spec, first, 0.01, "--log-level", "INFO")
    b = None
    try:
        with CommitSampler(kafka_broker.bootstrap, group, topic, PARTITIONS) as sampler:
            wait_until(lambda: lines(first) >= 300, timeout=60, message="the first member runs")
            b = start_consumer(spec, second, 0.01)
            wait_until(lambda: lines(second) >= 300, timeout=60, message="the second one runs")
            b.send_signal(signal.SIGTERM)  # a clean leave, once its group has settled
            finish(b)
            left = time.monotonic()
            wait_until(
                lambda: committed() == ends,
                timeout=90,
                message="the first member read every partition to the end after the second left",
            )
            caught_up = time.monotonic() - left
            a.send_signal(signal.SIGTERM)
            out = finish(a)
            verdict = finish_and_verify(
                kafka_broker, spec, topic, group, PARTITIONS, [first, second], sampler, records
            )
    finally:
        for proc in (a, b):
            if proc is not None and proc.poll() is None:
                proc.kill()
                proc.wait(timeout=30)
    print(verdict.line(f"paused through a rebalance, at the end {caught_up:.1f}s after a leave"))
    assert verdict.ok, verdict
    assert "delivered nothing for" not in out, "the assignment left partitions paused"
