"""Consumer *processes* on a real broker: kill -9 and restart, members leaving and joining.

Each process is ``lanehouse consume`` on a spec whose handler appends ``key seq partition
offset epoch`` lines to its own file (tests/support/recording.py). Across runs nothing may
be missing; within one partition assignment each key's sequence numbers must strictly increase.
"""

from __future__ import annotations

import re
import signal
import time
import urllib.request
from pathlib import Path

import pytest

from consumers.backends.kafka.consumer import committed_offsets
from consumers.dev.embedded.tansu import TansuBroker
from consumers.dev.sample import produce_sample
from tests.backends import assert_all_committed
from tests.helpers import free_port, wait_until
from tests.support.processes import (
    assert_complete,
    finish,
    lines,
    start_consumer,
    write_spec,
)

pytestmark = pytest.mark.integration


def test_kill_9_mid_run_then_restart_loses_nothing(
    kafka_broker: TansuBroker, topic_factory, tmp_path: Path
) -> None:
    topic = topic_factory(4)
    count, keys = 20_000, 200
    produce_sample(kafka_broker.bootstrap, topic, count, keys)
    spec = write_spec(tmp_path / "spec.yaml", kafka_broker, topic, "g-kill", concurrency=50)
    first, second = tmp_path / "run1.txt", tmp_path / "run2.txt"

    proc = start_consumer(spec, first, 0.01)
    wait_until(lambda: lines(first) >= 4000, timeout=60, message="first run made progress")
    proc.kill()  # SIGKILL: no drain, no final commit
    proc.wait(timeout=10)
    assert lines(first) < count, "the first run finished before it was killed"

    finish(start_consumer(spec, second, 0.0, "--until-idle", "2"))

    assert_complete([first, second], count, keys)
    assert_all_committed(kafka_broker.bootstrap, "g-kill", topic, 4)


def test_member_joining_and_leaving_loses_nothing(
    kafka_broker: TansuBroker, topic_factory, tmp_path: Path
) -> None:
    topic = topic_factory(4)
    count, keys = 30_000, 300
    produce_sample(kafka_broker.bootstrap, topic, count, keys)
    spec = write_spec(tmp_path / "spec.yaml", kafka_broker, topic, "g-group", concurrency=40)
    run_a, run_b = tmp_path / "a.txt", tmp_path / "b.txt"

    # 50 ms a record at 40 at once: about 800 records/s, so A alone needs half a minute for
    # what the leave must still find. At 20 ms A had read 27,950 of 30,000 before B, started
    # on a loaded machine, had handled its first 2,000.
    a = start_consumer(spec, run_a, 0.05, "--until-idle", "3")
    wait_until(lambda: lines(run_a) >= 2000, timeout=60, message="member A made progress")
    b = start_consumer(spec, run_b, 0.05)
    wait_until(lambda: lines(run_b) >= 2000, timeout=60, message="member B got partitions")
    assert lines(run_a) < count - 5000, "A finished too early for the leave to matter"
    b.send_signal(signal.SIGTERM)  # graceful leave: drain, commit, close
    finish(b)
    finish(a)

    assert_complete([run_a, run_b], count, keys)
    assert_all_committed(kafka_broker.bootstrap, "g-group", topic, 4)


def test_second_signal_exits_at_once_without_committing_unfinished_work(
    kafka_broker: TansuBroker, topic_factory, tmp_path: Path
) -> None:
    topic = topic_factory(1)
    produce_sample(kafka_broker.bootstrap, topic, 50, keys=50)
    spec = write_spec(tmp_path / "spec.yaml", kafka_broker, topic, "g-twice", concurrency=5)
    port = free_port()
    # Handlers sleep up to 600 s: the graceful drain (10 s limit) cannot finish them.
    proc = start_consumer(spec, tmp_path / "run.txt", 600.0, "--metrics-port", str(port))

    def in_flight() -> float:
        try:
            with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=2) as resp:
                text = resp.read().decode()
        except OSError:
            return 0.0
        match = re.search(r'^lanehouse_in_flight\{workload="recorder"\} (\S+)$', text, re.M)
        return float(match.group(1)) if match else 0.0

    wait_until(lambda: in_flight() == 5, timeout=60, message="five handlers running")
    proc.send_signal(signal.SIGTERM)  # graceful: starts a drain that cannot finish in time
    wait_until(lambda: in_flight() == 5, timeout=5, message="still draining")
    started = time.monotonic()
    proc.send_signal(signal.SIGTERM)  # the second signal: exit now
    proc.wait(timeout=5)
    assert proc.returncode == 130
    assert time.monotonic() - started < 5
    # No record finished: the commit position may be "none" (-1001) or offset 0, never beyond.
    assert committed_offsets(kafka_broker.bootstrap, "g-twice", topic, 1)[0] in (-1001, 0)
