"""A stop reads the partitions' ends once more, so the final report's lag counts every one.

Before: ends were read only on the source's 1 s timer. A partition whose first fetch response
came after the last reading (the client knows an end only from its fetch responses) had no end
in the report a stop made within that second: its lag was left out of the workload's lag (a
clean-clone run reported 5,740 records behind where 7,670 waited).
"""

from __future__ import annotations

import asyncio

import pytest

from consumers import ConsumerApp, RunnerSettings, Workload
from consumers.backends.base import CommitResult, PartitionKey
from consumers.backends.memory import MemoryBroker, MemoryConsumer
from consumers.engine import source
from consumers.service.metrics import workload_snapshot
from tests.helpers import until

pytestmark = [pytest.mark.unit, pytest.mark.timeout(30)]

TOPIC = "events"


async def test_the_final_report_has_the_end_of_a_partition_first_read_after_the_last_timer(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # The timer reads once, as the source starts (nothing assigned yet), and never again.
    monkeypatch.setattr(source, "WATERMARK_REFRESH_SECONDS", 3600.0)
    broker = MemoryBroker()
    broker.create_topic(TOPIC, 2)
    for partition, count in ((0, 3), (1, 5)):
        for _ in range(count):
            broker.produce(TOPIC, b"v", b"k", partition=partition)
    asked: list[PartitionKey] = []

    def factory(on_commit: CommitResult) -> MemoryConsumer:
        consumer = MemoryConsumer(broker, "g", on_commit)
        read = consumer.high_watermark

        def high_watermark(part: PartitionKey) -> int:
            asked.append(part)
            return read(part)

        consumer.high_watermark = high_watermark  # type: ignore[method-assign]
        return consumer

    app = ConsumerApp(
        [Workload(RunnerSettings(name="ends", drain_timeout=5.0), lambda r: None, [TOPIC], factory)]
    )
    run = asyncio.ensure_future(app.run())
    await until(
        lambda: "ends" in app.runners and app.runners["ends"].counters.snapshot()["completed"] == 8,
        10,
    )
    assert not asked, f"the timer read ends after the start: {asked}"
    app.request_stop()
    await run

    snap = workload_snapshot(app, "ends", app.clock.now())
    ends = {p.partition: (p.end, p.lag) for p in snap.partitions}
    assert ends == {0: (3, 0), 1: (5, 0)}
