"""Faults in the permit database a workload leases from (SQLite and a real PostgreSQL), checked by
the suite's one verifier (``verifier.py``) on a real broker (Tansu)."""

from __future__ import annotations

import time
from pathlib import Path

import pytest

from consumers.dev.embedded.tansu import TansuBroker
from tests.helpers import wait_until
from tests.permit_outage import PermitDb, outage
from tests.reliability.faults import SOAK, fill, finish_and_verify
from tests.reliability.verifier import CommitSampler
from tests.support.processes import lines, start_consumer, write_spec

pytestmark = pytest.mark.reliability

PARTITIONS = 4
KEYS = 200
POOL = 20
TTL = 3.0


def test_the_permit_database_lost_past_a_lease_then_a_kill_loses_nothing(
    kafka_broker: TansuBroker, topic_factory, tmp_path: Path, permit_db: PermitDb
) -> None:
    """The permit database goes away for longer than the lease while records flow: the
    consumer stops starting records once its lease has ended, and carries on when the
    database is back. Then ``kill -9`` (its lease is left behind to expire) and one run to
    idleness."""
    backend, url, server = permit_db
    config = tmp_path / "lanehouse.yaml"
    config.write_text(
        f"permits:\n  url: {url}\n  lease_ttl: {TTL}s\n  sync_interval: 100ms\n"
        f"  pools:\n    shared: {{size: {POOL}}}\n"
    )
    env = {"LANEHOUSE_CONFIG": str(config)}
    count = 100_000 if SOAK else 20_000
    topic = topic_factory(PARTITIONS)
    records = fill(kafka_broker, topic, count, KEYS, PARTITIONS)
    group = f"g-permits-{backend}"
    spec = write_spec(
        tmp_path / "spec.yaml",
        kafka_broker,
        topic,
        group,
        concurrency=50,
        extra="permits: {pool: shared, weight: 1}\n",
    )
    run = tmp_path / "run.txt"
    with CommitSampler(kafka_broker.bootstrap, group, topic, PARTITIONS) as sampler:
        proc = start_consumer(spec, run, 0.02, env=env)  # ~2,000 records/s from 20 permits
        wait_until(lambda: lines(run) >= count // 5, timeout=120, message="progress")
        with outage(backend, url, server):
            # The outage is the input: its length is the fault, not a wait for a condition.
            time.sleep(TTL + 1.0)
            stalled = lines(run)
            time.sleep(1.0)
            during = lines(run) - stalled
        assert stalled < count, "every record was handled before the lease ended"
        assert during == 0, f"{during} records handled after the lease had ended"
        back, before = time.monotonic(), lines(run)
        wait_until(lambda: lines(run) > before + 500, timeout=60, message="progress after")
        recovery = time.monotonic() - back
        assert proc.poll() is None, "the consumer exited"
        proc.kill()  # SIGKILL: the lease stays behind until it expires
        proc.wait(timeout=30)
        verdict = finish_and_verify(
            kafka_broker, spec, topic, group, PARTITIONS, [run], sampler, records, env=env
        )
    print(
        verdict.line(
            f"permit database ({backend}) lost {TTL + 2:.0f}s > lease {TTL:.0f}s, "
            f"resumed in {recovery:.1f}s, then kill -9"
        )
    )
    assert verdict.ok, verdict
