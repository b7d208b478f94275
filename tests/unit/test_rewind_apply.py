"""The broker-neutral rewind (``consumers/rewind/apply.py``) on the in-memory broker's
``GroupRewinder``: plans, refusals that change nothing, positions by time, landed files cut back.

The same entry runs on Tansu and pulsar-lite in ``tests/integration/test_rewind.py``.
"""

from __future__ import annotations

import time
from pathlib import Path

import pytest

from consumers import (
    ConsumerApp,
    LandingSettings,
    RewindRefused,
    RunnerSettings,
    SourceIdentity,
    Workload,
    WorkloadSpec,
)
from consumers.backends.memory import MemoryBroker
from consumers.backends.memory_admin import MemoryRewinder
from consumers.landing.sink import land_as_is
from consumers.rewind.apply import rewind_workload
from consumers.rewind.target import RewindTarget, parse_target
from tests.landing import every_offset_once, per_offset

TOPIC, GROUP = "events", "g"
IDS = {TOPIC: SourceIdentity("kafka", "memory", TOPIC, "id-1")}


def spec(landing: bool = False) -> WorkloadSpec:
    data: dict[str, object] = {
        "name": "landing",
        "source": {"kind": "kafka", "bootstrap_servers": "memory:9092", "topics": [TOPIC]},
        "handler": None if landing else "tests.handlers:noop",
    }
    if landing:
        data["landing"] = {"dataset": "events"}
    return WorkloadSpec.model_validate(data)


def broker_with(per_partition: int, committed: int | None) -> MemoryBroker:
    broker = MemoryBroker()
    broker.create_topic(TOPIC, 2)
    for p in range(2):
        for i in range(per_partition):
            broker.produce(TOPIC, f"{p}-{i}".encode(), partition=p)
    if committed is not None:
        broker.alter_offsets(GROUP, [(TOPIC, p, committed) for p in range(2)])
    return broker


def test_a_dry_run_plans_and_writes_nothing() -> None:
    broker = broker_with(10, committed=8)
    plan = rewind_workload(
        spec(),
        parse_target("earliest"),
        dry_run=True,
        rewinder=MemoryRewinder(broker, GROUP, [TOPIC]),
    )
    assert not plan.applied and plan.group == GROUP and plan.target == "earliest"
    assert [(m.partition, m.committed, m.new, m.again) for m in plan.moves] == [
        (0, 8, 0, 8),
        (1, 8, 0, 8),
    ]
    assert broker.committed_offsets(GROUP, TOPIC) == [8, 8]
    assert plan.lines()[-1] == "  total: 16 records handled again"


def test_a_rewind_writes_the_positions_of_the_chosen_partitions() -> None:
    broker = broker_with(10, committed=3)
    rewinder = MemoryRewinder(broker, GROUP, [TOPIC])
    plan = rewind_workload(spec(), parse_target("latest"), partitions=[1], rewinder=rewinder)
    assert plan.applied and [(m.partition, m.new, m.again) for m in plan.moves] == [(1, 10, 0)]
    assert broker.committed_offsets(GROUP, TOPIC) == [3, 10]


def test_a_time_puts_each_partition_at_its_first_record_at_or_after_it() -> None:
    broker = MemoryBroker()
    broker.create_topic(TOPIC, 1)
    broker.produce(TOPIC, b"old", partition=0)
    middle = broker.read(TOPIC)[0][0].timestamp()[1] + 1
    while broker.read(TOPIC)[0][-1].timestamp()[1] < middle:  # the clock moves on
        broker.produce(TOPIC, b"later", partition=0)
    rewinder = MemoryRewinder(broker, GROUP, [TOPIC])
    first_later = next(m.offset() for m in broker.read(TOPIC)[0] if m.timestamp()[1] >= middle)
    plan = rewind_workload(spec(), RewindTarget("time", middle), rewinder=rewinder)
    assert [m.new for m in plan.moves] == [first_later] and first_later >= 1
    assert broker.committed_offsets(GROUP, TOPIC) == [first_later]


def test_live_members_and_unknown_partitions_are_refused_with_nothing_changed() -> None:
    broker = broker_with(5, committed=5)
    rewinder = MemoryRewinder(broker, GROUP, [TOPIC])
    member = broker.consumer(GROUP)
    member.subscribe([TOPIC])
    with pytest.raises(RewindRefused, match="has live members"):
        rewind_workload(spec(), parse_target("earliest"), rewinder=rewinder)
    member.close()
    with pytest.raises(RewindRefused, match="no partition 7"):
        rewind_workload(spec(), parse_target("earliest"), partitions=[7], rewinder=rewinder)
    assert broker.committed_offsets(GROUP, TOPIC) == [5, 5]


async def test_a_rewind_cuts_the_landed_files_back_and_each_offset_lands_once(
    tmp_path: Path,
) -> None:
    """One file per partition (no flush before the drain), so the new position is inside it:
    without the cut, its records from there on would land twice when the group reads again."""
    broker = MemoryBroker()
    broker.create_topic(TOPIC, 2)
    before = produce_two_halves(broker, 70, 30)
    await ConsumerApp([landing(broker, tmp_path)]).run(until_idle=0.3)
    assert per_offset(tmp_path) == every_offset_once({0: 100, 1: 100})

    plan = rewind_workload(
        spec(landing=True),
        RewindTarget("time", before + 1),
        lake=tmp_path,
        rewinder=MemoryRewinder(broker, GROUP, [TOPIC], identities=IDS),
    )
    assert [(m.new, m.again, m.trimmed_files) for m in plan.moves] == [(70, 30, 1), (70, 30, 1)]
    assert per_offset(tmp_path) == every_offset_once({0: 70, 1: 70})
    await ConsumerApp([landing(broker, tmp_path)]).run(until_idle=0.3)
    assert per_offset(tmp_path) == every_offset_once({0: 100, 1: 100})


def produce_two_halves(broker: MemoryBroker, first: int, then: int) -> int:
    """``first`` records per partition, then ``then`` stamped later; returns the first's last
    timestamp (epoch ms)."""
    produce(broker, first)
    before = max(m.timestamp()[1] for log in broker.read(TOPIC) for m in log)
    while int(time.time() * 1000) <= before:  # the rest is later, to the millisecond
        time.sleep(0.001)
    produce(broker, then)
    return before


def produce(broker: MemoryBroker, per_partition: int) -> None:
    for p in range(2):
        for i in range(per_partition):
            broker.produce(TOPIC, f"{p}-{i}".encode(), key=f"k{i % 7}".encode(), partition=p)


def landing(broker: MemoryBroker, lake: Path) -> Workload:
    settings = LandingSettings(lake, "events", "landing", "spec-1", flush_rows=1_000)
    return Workload(
        RunnerSettings(name="landing", landing=settings, commit_interval=0.05, drain_timeout=2.0),
        land_as_is,
        [TOPIC],
        lambda on_commit: broker.consumer(GROUP, on_commit),
        identify=lambda topics: {t: IDS[t] for t in topics},
    )
