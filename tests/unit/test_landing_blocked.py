"""A full disk under landing: the partition's intake pauses (nothing is handled ahead), its
writes retry with bounded backoff and one log line per step, no empty temporaries pile up,
idleness is not declared and a stop with records unlanded fails; assignment work the disk
refuses waits for it instead of crashing the process."""

from __future__ import annotations

import asyncio
import errno
import logging
import os
from pathlib import Path
from typing import Any

import pytest

import consumers.landing.files as files_module
from consumers import ConsumerApp, LandingError
from consumers.backends.memory import MemoryBroker, MemoryConsumer
from consumers.landing.files import write_landed
from consumers.landing.gates import MAX_RETRY
from tests.helpers import until
from tests.landing import every_offset_once, memory_landing, per_offset, visible
from tests.unit.test_landing import SOURCE, Harness, row

pytestmark = [pytest.mark.unit, pytest.mark.timeout(30)]

TOPIC = "events"


class Disk:
    """Makes every landed-file write (and rewrite) fail with ENOSPC while ``full``."""

    def __init__(self, monkeypatch: pytest.MonkeyPatch, only: str = "") -> None:
        self.full = True
        self.failures = 0
        real = files_module._write_atomically

        def write(path: Path, table: Any) -> None:
            if self.full and only in path.name:
                self.failures += 1
                raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))
            real(path, table)

        monkeypatch.setattr(files_module, "_write_atomically", write)


def space_warnings(caplog: pytest.LogCaptureFixture) -> list[str]:
    return [r.getMessage() for r in caplog.records if "No space left" in r.getMessage()]


async def test_a_failing_partition_blocks_retries_with_backoff_and_logs_once_per_step(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    disk = Disk(monkeypatch, only="-p0-")
    h = Harness(tmp_path, flush_rows=2)
    told: list[tuple[str, int, bool]] = []
    h.sink.gates.on_blocked = lambda topic, partition, blocked: told.append(
        (topic, partition, blocked)
    )
    for offset in range(6):  # three files of partition 0
        h.add(SOURCE, row(0, offset))
    h.add(SOURCE, row(1, 0))
    h.add(SOURCE, row(1, 1))  # partition 1 lands: it is not blocked
    await until(lambda: (1, 1) in h.done and h.clock.sleeping == 1)
    # The three files were being written at once; from now on one write probes the disk.
    assert told == [("clicks", 0, True)] and disk.failures == 3
    delays = []
    while disk.failures < 11:
        waited = h.clock._sleepers[0][0] - h.clock.now()
        delays.append(round(waited, 3))
        step = disk.failures + 1
        h.clock.advance(waited)

        def probed(step: int = step) -> bool:
            return disk.failures == step and h.clock.sleeping == 1

        await until(probed)
    assert delays == [0.1, 0.2, 0.4, 0.8, 1.6, 3.2, MAX_RETRY, MAX_RETRY]
    lines = space_warnings(caplog)
    assert len(lines) == 9  # one per attempt of the one probing write, not one per file
    assert "clicks[0]" in lines[0] and "-p0-o" in lines[0] and "(ENOSPC)" in lines[0]
    assert h.sink.gates.blocked() == [("clicks", 0)] and h.sink.pending("clicks", 0) == 6

    disk.full = False
    h.clock.advance(MAX_RETRY)
    await until(lambda: len(h.done) == 8)
    assert told[-1] == ("clicks", 0, False) and h.sink.gates.blocked() == []


def test_a_failed_write_leaves_no_temporary(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Before: every retry on a full disk left a zero-byte ``.tmp`` behind."""

    def no_space(fd: int) -> None:
        raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))

    monkeypatch.setattr(os, "fsync", no_space)  # the os module files_module calls
    path = tmp_path / "event_date=2026-11-20" / "clicks-p0-o0.parquet"
    with pytest.raises(OSError):
        write_landed(path, SOURCE, [row(0, 0)], 0, "w", "h")
    assert list(path.parent.iterdir()) == []


def fill(broker: MemoryBroker, count: int, partitions: int = 1) -> None:
    broker.create_topic(TOPIC, partitions)
    for i in range(count):
        broker.produce(TOPIC, str(i).encode(), f"k{i % 40}".encode())


def consumers_of(broker: MemoryBroker, workload: Any, made: list[MemoryConsumer]) -> Any:
    """``workload`` with its consumers kept in ``made``, to look at their paused partitions."""

    def factory(on_commit: Any) -> MemoryConsumer:
        made.append(broker.consumer("g", on_commit))
        return made[-1]

    return type(workload)(**{**workload.__dict__, "consumer_factory": factory})


async def test_a_full_disk_pauses_intake_until_it_lands_and_is_never_idle(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Before: the workload kept consuming up to its buffer (10,000 records by default) while
    no file could be written, and ``until_idle`` stopped it with records unlanded."""
    disk, broker, lake = Disk(monkeypatch), MemoryBroker(), tmp_path / "lake"
    fill(broker, 100)
    made: list[MemoryConsumer] = []
    app = ConsumerApp([consumers_of(broker, memory_landing(broker, TOPIC, lake), made)])
    run = asyncio.ensure_future(app.run(until_idle=0.3))
    await until(lambda: made and made[0]._paused == {(TOPIC, 0)}, what="paused at the client")
    assert app.runners["landing"].parts[(TOPIC, 0)].paused and not run.done()  # not a stop
    for i in range(3_000):
        broker.produce(TOPIC, str(i).encode(), f"k{i % 40}".encode())
    await until(lambda: disk.failures >= 5, what="retries past the idle time")  # 1.5 s
    assert not run.done()  # blocked is not idle
    assert app.runners["landing"].counters.consumed == 100  # nothing handled ahead

    disk.full = False
    await run
    ends = dict(enumerate(broker.end_offsets(TOPIC)))
    assert per_offset(lake) == every_offset_once(ends)
    assert dict(enumerate(broker.committed_offsets("g", TOPIC))) == ends


async def test_a_stop_with_records_unlanded_fails_naming_them(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Before: the run ended as if it had finished, its records neither landed nor reported."""
    Disk(monkeypatch)
    broker, lake = MemoryBroker(), tmp_path / "lake"
    fill(broker, 100)
    app = ConsumerApp([memory_landing(broker, TOPIC, lake, drain_timeout=0.3)])
    run = asyncio.ensure_future(app.run())

    def blocked() -> object:
        runner = app.runners.get("landing")
        if runner is None:
            return False
        assert runner.landing is not None  # a landing workload's runner has its sink
        return runner.landing.gates.blocked()

    await until(blocked, what="blocked")
    app.request_stop()
    with pytest.raises(LandingError) as failed:
        await run
    message = str(failed.value)
    assert "workload landing: stopped with 100 records not landed" in message
    assert "No space left on device (ENOSPC)" in message and str(lake) in message
    assert broker.committed_offsets("g", TOPIC) == [0]  # nothing committed past them


async def test_assignment_work_the_disk_refuses_waits_for_it(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    """Before: the assignment raised a bare OSError and the process stopped, on every restart
    while the disk stayed full. Here the restart must cut a file back (its position lies inside
    it), which needs space."""
    broker, lake = MemoryBroker(), tmp_path / "lake"
    fill(broker, 400, partitions=2)
    await ConsumerApp([memory_landing(broker, TOPIC, lake)]).run(until_idle=0.3)
    group = broker._groups["g"]
    group.committed[(TOPIC, 0)] = (group.committed[(TOPIC, 0)][0] - 25, "")  # inside a file
    disk = Disk(monkeypatch, only="-p0-")
    caplog.set_level(logging.INFO, "lanehouse")
    made: list[MemoryConsumer] = []
    app = ConsumerApp([consumers_of(broker, memory_landing(broker, TOPIC, lake), made)])
    run = asyncio.ensure_future(app.run(until_idle=0.3))
    await until(lambda: disk.failures >= 3, what="the deferred work retried")
    [line] = [r.getMessage() for r in caplog.records if "at assignment failed" in r.getMessage()]
    assert "workload landing: events[0]" in line and "ENOSPC" in line and str(lake) in line
    assert not run.done() and made[0]._paused == {(TOPIC, 0)}
    disk.full = False
    await run
    ends = dict(enumerate(broker.end_offsets(TOPIC)))
    assert per_offset(lake) == every_offset_once(ends)
    assert len(visible(lake)) > 2
