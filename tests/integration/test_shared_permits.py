"""One permit pool shared by three consumer processes, leased through a real database.

Three ``lanehouse consume`` processes, one workload each (weights 1, 2, 3), read three topics on
the embedded Kafka broker and draw from one pool of ``POOL`` permits declared in a platform
config. The handler holds its permit ``HOLD`` seconds and records start and end times, so the
run's true concurrency is measured from the handlers themselves, across processes:

1. all saturated: never more than ``POOL`` handlers at once, and each workload's share of the
   busy time is its weight's share of the pool within ``SHARE_TOLERANCE``;
2. ``kill -9`` of the heaviest process: the others are granted its permits within the lease
   TTL (plus renewal slack) and use them, never more than ``POOL`` handlers at once.

The database lost for longer than a lease is a fault of the reliability suite
(``tests/reliability/test_permit_faults.py``).

Runs on SQLite (one file, the default on one machine) and on a real PostgreSQL server.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path

import pytest

from consumers.dev.embedded.tansu import TEST_CLIENT_CONFIG, TansuBroker
from consumers.dev.sample import produce_sample
from consumers.permits.store import PermitStore, PoolStatus
from tests.helpers import wait_until
from tests.permit_outage import PermitDb
from tests.support.permit_recording import (
    Interval,
    max_concurrency,
    mean_concurrency,
    read_intervals,
)
from tests.support.processes import REPO

pytestmark = [pytest.mark.integration, pytest.mark.slow]

POOL = 12
WEIGHTS = {"light": 1.0, "middle": 2.0, "heavy": 3.0}
HOLD = 0.05
TTL = 3.0
#: Allowed gap between a workload's measured share of busy time and its weight's share.
SHARE_TOLERANCE = 0.06
RECORDS = 8000


def wait_for(condition: Callable[[], bool], within: float, what: str) -> float:
    """:func:`wait_until`, returning the wall-clock time the condition held (the records'
    intervals are wall-clock times, from several processes)."""
    wait_until(condition, within, 0.05, what)
    return time.time()


def test_three_processes_share_one_pool_fairly_and_safely(
    kafka_broker: TansuBroker,
    tmp_path: Path,
    permit_db: PermitDb,
) -> None:
    backend, url, _ = permit_db
    config = tmp_path / "lanehouse.yaml"
    config.write_text(
        f"permits:\n  url: {url}\n  lease_ttl: {TTL}s\n  sync_interval: 100ms\n"
        f"  pools:\n    shared: {{size: {POOL}}}\n"
    )
    client_config = "\n".join(f"    {k}: {v}" for k, v in TEST_CLIENT_CONFIG.items())
    procs: dict[str, subprocess.Popen[bytes]] = {}
    files = {name: tmp_path / f"{name}.log" for name in WEIGHTS}
    suffix = f"{backend}-{os.getpid()}-{int(time.time() * 1000)}"
    for name, weight in WEIGHTS.items():
        topic = f"permits-{name}-{suffix}"
        produce_sample(kafka_broker.bootstrap, topic, RECORDS, keys=2000, partitions=4)
        spec = tmp_path / f"{name}.yaml"
        spec.write_text(
            f"""name: {name}
source:
  kind: kafka
  bootstrap_servers: {kafka_broker.bootstrap}
  topics: [{topic}]
  group: g-{topic}
  config:
{client_config}
handler: tests.support.permit_recording:timed
concurrency: 40
drain_timeout: 5s
permits: {{pool: shared, weight: {weight}}}
"""
        )
        env = {
            **os.environ,
            "PYTHONPATH": str(REPO),
            "LANEHOUSE_CONFIG": str(config),
            "LH_RECORD_FILE": str(files[name]),
            "LH_WORKLOAD": name,
            "LH_HOLD": str(HOLD),
        }
        procs[name] = subprocess.Popen(
            [sys.executable, "-m", "orchestration.cli", "consume", str(spec)],
            cwd=REPO,
            env=env,
            stdout=subprocess.DEVNULL,
            stderr=open(tmp_path / f"{name}.err", "wb"),  # noqa: SIM115 - closed with the test dir
        )
    store = PermitStore(url)

    def intervals(*names: str) -> list[Interval]:
        return [
            row
            for n in names or WEIGHTS
            if files[n].exists()
            for row in read_intervals(str(files[n]))
        ]

    killed: set[str] = set()

    def alive() -> bool:
        """Fail at once, with its log, if a process that should run has exited."""
        for name, proc in procs.items():
            if name not in killed:
                assert proc.poll() is None, (tmp_path / f"{name}.err").read_text()[-3000:]
        return True

    try:
        # 1. Saturated: measure shares over a window once everybody runs.
        wait_for(
            lambda: alive() and all(len(intervals(n)) >= 50 for n in WEIGHTS),
            60,
            "all three workloads to run",
        )
        since = time.time() + 1.0
        until = since + 5.0
        wait_for(
            lambda: alive() and all(max(e for _, _, e in intervals(n)) > until for n in WEIGHTS),
            30,
            "the measurement window to pass",
        )
        means = {n: mean_concurrency(intervals(n), since, until) for n in WEIGHTS}
        busy = sum(means.values())
        total_weight = sum(WEIGHTS.values())
        shares = {n: means[n] / busy for n in WEIGHTS}
        print(f"\n[{backend}] mean concurrency {means} (pool {POOL}); shares {shares}")
        assert busy >= 0.8 * POOL, means  # saturated: the pool is used, not just respected
        for n, weight in WEIGHTS.items():
            assert abs(shares[n] - weight / total_weight) <= SHARE_TOLERANCE, shares

        # 2. kill -9 the heaviest holder: its permits come back to the others within the TTL.
        procs["heavy"].send_signal(signal.SIGKILL)
        procs["heavy"].wait()
        killed.add("heavy")
        killed_at = time.time()

        def survivors_granted() -> int:
            [pool] = [p for p in store.status() if p.pool == "shared"]
            return _granted(pool, "light", "middle")

        regained = wait_for(lambda: survivors_granted() == POOL, TTL + 5, "the survivors' grant")
        print(
            f"[{backend}] survivors granted the whole pool {regained - killed_at:.2f} s after kill -9"
        )
        assert regained - killed_at <= TTL + 1.5
        used_from = regained + 0.5
        wait_for(
            lambda: (
                alive()
                and all(
                    max(e for _, _, e in intervals(n)) > used_from + 2 for n in ("light", "middle")
                )
            ),
            15,
            "the survivors to use the regained permits",
        )
        regained_use = mean_concurrency(intervals("light", "middle"), used_from, used_from + 2)
        print(f"[{backend}] survivors' mean concurrency after the takeover {regained_use:.1f}")
        assert regained_use >= 0.8 * POOL

        peak = max_concurrency(intervals())
        print(f"[{backend}] peak concurrency across processes {peak} (pool {POOL})")
        assert peak <= POOL
        for name in ("light", "middle"):
            procs[name].send_signal(signal.SIGTERM)
        for name in ("light", "middle"):
            assert procs[name].wait(timeout=30) == 0, (tmp_path / f"{name}.err").read_text()[-3000:]
        # A clean stop deletes the leases at once; the killed holder's expired lease remains.
        [pool] = [p for p in store.status() if p.pool == "shared"]
        assert {lease.workload for lease in pool.leases} <= {"heavy"}
    finally:
        for proc in procs.values():
            if proc.poll() is None:
                proc.kill()
                proc.wait()
        store.close()


def _granted(pool: PoolStatus, *workloads: str) -> int:
    return sum(lease.granted for lease in pool.live() if lease.workload in workloads)
