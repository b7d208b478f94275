"""Faults on a Pulsar source (pulsar-lite), checked by the suite's one verifier (``verifier.py``).

pulsar-lite admits one client per subscription, so the acknowledged position (the first message,
in produce order, the subscription has not acknowledged: the Kafka shape) is sampled between
runs, while no consumer holds the subscription, rather than every 100 ms.
"""

from __future__ import annotations

import json
import os
import random
from pathlib import Path

import pytest

from consumers.dev.embedded.pulsar import start_pulsar_lite
from tests.backends import PulsarBackend, keyed_stream
from tests.reliability.faults import SOAK, kill_after
from tests.reliability.verifier import Positions, verify
from tests.support.processes import finish, start_consumer, write_spec

pytestmark = pytest.mark.reliability

KEYS = 200
KILLS = 10 if SOAK else 3


def test_kill_9_and_broker_restarts_on_pulsar_lose_nothing(tmp_path: Path) -> None:
    """``kill -9`` of a Pulsar consumer after a random number of records, each time followed by
    a restart of the broker (pulsar-lite keeps a killed consumer registered until it restarts;
    production Pulsar drops it with its connection), then one run to idleness."""
    data = tmp_path / "pulsar"
    backend = PulsarBackend(start_pulsar_lite(data_dir=data))
    try:
        topic = backend.make_topic(1)
        count = 100_000 if SOAK else 20_000
        backend.produce(topic, keyed_stream(count, keys=KEYS, seed=11))
        records = {
            (value["key"], value["seq"])
            for stored in backend.read(topic, 1)[0]
            if stored.value is not None and (value := json.loads(stored.value))
        }
        group = "g-pulsar-kill"
        spec = write_spec(tmp_path / "spec.yaml", backend.broker, topic, group, concurrency=50)
        rng = random.Random(f"pulsar-{os.environ.get('LH_SEED', '0')}")
        positions = Positions(1)
        runs: list[Path] = []
        for i in range(KILLS):
            run = tmp_path / f"run{i}.txt"
            runs.append(run)
            kill_after(spec, run, 0.005, rng.randint(0, count // 5))
            backend.broker.stop()
            backend.broker = start_pulsar_lite(port=backend.broker.port, data_dir=data)
            positions.add(backend.committed(group, topic, 1))
        final = tmp_path / "final.txt"
        runs.append(final)
        finish(start_consumer(spec, final, 0.0, "--until-idle", "2", "--log-level", "INFO"))
        committed = backend.committed(group, topic, 1)
        positions.add(committed)
        verdict = verify(records, runs, positions, committed, backend.log_end(topic, 1))
    finally:
        backend.broker.stop()
    print(verdict.line(f"pulsar: kill -9 and a broker restart x{KILLS}"))
    assert verdict.ok, verdict
