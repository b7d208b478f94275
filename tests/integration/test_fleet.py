"""`lanehouse consume --replicas 2` on the embedded Tansu broker: the replicas form one group,
split the partitions, lose nothing, keep per-key order, commit to the end, and stop together.

Each replica's handler (tests/support/fleet_recording.py) writes what it handled, with a
system-wide monotonic timestamp, to its own file.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from collections import Counter, defaultdict
from pathlib import Path

import pytest

from consumers.backends.kafka.consumer import committed_offsets
from consumers.dev.embedded.tansu import TansuBroker
from consumers.dev.sample import produce_sample
from tests.backends import assert_all_committed
from tests.helpers import wait_until
from tests.support.fleet_recording import (
    Handled,
    assert_key_order,
    assert_no_two_owners_at_once,
    read_fleet,
)
from tests.support.processes import REPO, write_spec

pytestmark = [pytest.mark.integration, pytest.mark.timeout(120)]

PARTITIONS = 4


def start_fleet(spec: Path, records: Path, delay: float, *extra: str) -> subprocess.Popen[str]:
    env = {
        **os.environ,
        "PYTHONPATH": str(REPO),
        "LH_RECORD_DIR": str(records),
        "LH_DELAY": str(delay),
    }
    return subprocess.Popen(
        [
            sys.executable,
            "-m",
            "orchestration.cli",
            "consume",
            str(spec),
            "--replicas",
            "2",
            *extra,
        ],
        cwd=REPO,
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )


def fleet_spec(tmp_path: Path, broker: TansuBroker, topic: str, group: str) -> Path:
    spec = write_spec(tmp_path / "spec.yaml", broker, topic, group, concurrency=20)
    text = spec.read_text().replace("tests.support.recording:", "tests.support.fleet_recording:")
    spec.write_text(text)
    return spec


def assert_committed_were_handled(rows: list[Handled], committed: dict[int, int]) -> None:
    """Nothing was committed that no replica handled (a drain commits completed work only)."""
    handled = defaultdict(set)
    for row in rows:
        handled[row.partition].add(row.offset)
    for partition, position in committed.items():
        missing = set(range(max(position, 0))) - handled[partition]
        assert not missing, (
            f"partition {partition}: committed unhandled offsets {sorted(missing)[:5]}"
        )


def test_two_replicas_split_partitions_and_lose_nothing(
    kafka_broker: TansuBroker, topic_factory, tmp_path: Path
) -> None:
    topic = topic_factory(PARTITIONS)
    count, keys = 10_000, 200
    produce_sample(kafka_broker.bootstrap, topic, count, keys)
    spec = fleet_spec(tmp_path, kafka_broker, topic, "g-fleet")
    proc = start_fleet(spec, tmp_path, 0.02, "--until-idle", "2")
    out, err = proc.communicate(timeout=90)
    assert proc.returncode == 0, f"fleet exited {proc.returncode}:\n{err[-3000:]}"

    rows = read_fleet(tmp_path)
    counts = Counter(row.replica for row in rows)
    assert set(counts) == {0, 1}, f"records per replica: {dict(counts)}"
    pids = {row.replica: row.pid for row in rows}
    assert len({row.pid for row in rows}) == 2 and pids[0] != pids[1]
    handled = {(row.key, row.seq) for row in rows}
    per_key = Counter(key for key, _ in handled)  # each key's records are numbered 0, 1, ...
    assert all((key, seq) in handled for key, n in per_key.items() for seq in range(n))
    assert len(handled) == count, f"records lost: {count - len(handled)} never handled"
    assert_key_order(rows)
    assert_no_two_owners_at_once(rows)
    assert_all_committed(kafka_broker.bootstrap, "g-fleet", topic, PARTITIONS)
    for i in (0, 1):
        assert f"[replica {i}] recorder: consumed " in out
        assert f"[replica {i}] " in err and "lanehouse.source: workload recorder: assigned" in err


def test_sigterm_to_the_supervisor_drains_every_replica_and_exits_0(
    kafka_broker: TansuBroker, topic_factory, tmp_path: Path
) -> None:
    topic = topic_factory(PARTITIONS)
    count = 30_000
    produce_sample(kafka_broker.bootstrap, topic, count, 300)
    spec = fleet_spec(tmp_path, kafka_broker, topic, "g-fleet-term")
    proc = start_fleet(spec, tmp_path, 0.02)

    def both_busy() -> bool:
        counts = Counter(row.replica for row in read_fleet(tmp_path))
        return counts[0] >= 300 and counts[1] >= 300

    wait_until(both_busy, timeout=60, interval=0.1, message="both replicas handle records")
    proc.send_signal(signal.SIGTERM)
    out, err = proc.communicate(timeout=60)
    assert proc.returncode == 0, f"fleet exited {proc.returncode}:\n{err[-3000:]}"

    rows = read_fleet(tmp_path)
    assert len(rows) < count, "the fleet finished before the signal: nothing was drained"
    for i in (0, 1):
        assert f"[replica {i}] " in err
        drain = [line for line in err.splitlines() if line.startswith(f"[replica {i}] ")]
        assert sum("stop requested: draining" in line for line in drain) == 1, drain
        assert f"[replica {i}] recorder: consumed " in out
    for pid in {row.pid for row in rows}:
        with pytest.raises(ProcessLookupError):
            os.kill(pid, 0)  # the supervisor waited for (and reaped) every replica
    committed = committed_offsets(kafka_broker.bootstrap, "g-fleet-term", topic, PARTITIONS)
    assert sum(max(c, 0) for c in committed.values()) > 0, committed
    assert_committed_were_handled(rows, committed)
    assert_key_order(rows)
    assert_no_two_owners_at_once(rows)


def test_a_replica_killed_stops_the_fleet_with_an_error_naming_it(
    kafka_broker: TansuBroker, topic_factory, tmp_path: Path
) -> None:
    topic = topic_factory(PARTITIONS)
    produce_sample(kafka_broker.bootstrap, topic, 30_000, 300)
    spec = fleet_spec(tmp_path, kafka_broker, topic, "g-fleet-kill")
    proc = start_fleet(spec, tmp_path, 0.02)
    wait_until(
        lambda: {row.replica for row in read_fleet(tmp_path)} == {0, 1},
        timeout=60,
        interval=0.1,
        message="both replicas handle records",
    )
    victim = next(row.pid for row in read_fleet(tmp_path) if row.replica == 1)
    os.kill(victim, signal.SIGKILL)
    out, err = proc.communicate(timeout=60)

    assert proc.returncode == 128 + signal.SIGKILL, err[-3000:]
    assert f"error: replica 1 (pid {victim}) was killed by SIGKILL; stopping the other" in err
    assert "[replica 0] " in err and "stop requested: draining" in err
    assert "[replica 0] recorder: consumed " in out
    rows = read_fleet(tmp_path)
    committed = committed_offsets(kafka_broker.bootstrap, "g-fleet-kill", topic, PARTITIONS)
    assert_committed_were_handled(rows, committed)
