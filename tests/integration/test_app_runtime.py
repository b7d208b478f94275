"""Workloads join and leave a running :class:`ConsumerApp` (what a host of many workloads
does): one added at runtime consumes beside the others, one removed drains and commits alone,
and with ``isolate=True`` one workload's failure stops it alone. Run unchanged in memory, on
Tansu and on pulsar-lite."""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable

import pytest

from consumers import (
    ConsumerApp,
    DeadLetter,
    LanehouseError,
    Record,
    RetryPolicy,
    RunnerSettings,
    Workload,
)
from tests.backends import Backend, MemoryBackend, keyed_stream
from tests.helpers import until

# The tier comes from tests/conftest.py: integration on a broker, unit in memory.

Handler = Callable[[Record], Awaitable[object]]


def workload(backend: Backend, topic: str, name: str, handler: Handler) -> Workload:
    settings = RunnerSettings(
        name=name,
        commit_interval=0.05,
        drain_timeout=10.0,
        retry=RetryPolicy(max_attempts=1, backoff=0.01, jitter=False),
    )
    return Workload(settings, handler, [topic], backend.factory(f"g-{name}"))


def collect(into: list[bytes | None]) -> Handler:
    async def handle(rec: Record) -> None:
        into.append(rec.value)

    return handle


async def test_workloads_join_and_leave_a_running_app_without_touching_the_others(
    backend: Backend,
) -> None:
    first_topic, second_topic = backend.make_topic(2), backend.make_topic(2)
    backend.produce(first_topic, keyed_stream(200, keys=10, seed=1))
    first: list[bytes | None] = []
    second: list[bytes | None] = []
    app = ConsumerApp([workload(backend, first_topic, "first", collect(first))], isolate=True)
    running = asyncio.ensure_future(app.run())
    try:
        await until(lambda: len(first) == 200, what="the first workload handled its 200")
        runner, source = app.runners["first"], app.sources["first"]
        rebalances = source.rebalances

        await app.add(workload(backend, second_topic, "second", collect(second)))
        backend.produce(second_topic, keyed_stream(150, keys=10, seed=2))
        await until(lambda: len(second) == 150, what="the added workload handled its 150")
        # The neighbour was not rebuilt nor rebalanced by the arrival.
        assert app.runners["first"] is runner and source.rebalances == rebalances

        retired = await app.remove("first")
        assert (retired.error, retired.unclean) == (None, None)
        assert retired.summary.counters["completed"] == 200
        assert backend.committed("g-first", first_topic, 2) == backend.log_end(first_topic, 2)
        assert set(app.runners) == {"second"} and "first" in app.retired

        # The survivor goes on; the removed one reads nothing more.
        backend.produce(first_topic, keyed_stream(30, keys=3, seed=3))
        backend.produce(second_topic, keyed_stream(50, keys=10, seed=4))
        await until(lambda: len(second) == 200, what="the remaining workload handled 50 more")
        assert len(first) == 200
    finally:
        app.request_stop()
        summaries = await running
    assert {s.name: s.counters["completed"] for s in summaries} == {"first": 200, "second": 200}
    assert backend.committed("g-second", second_topic, 2) == backend.log_end(second_topic, 2)


async def test_an_isolated_workloads_failure_stops_it_alone(backend: Backend) -> None:
    broken_topic, healthy_topic = backend.make_topic(1), backend.make_topic(1)
    backend.produce(broken_topic, keyed_stream(20, keys=1, seed=5))
    backend.produce(healthy_topic, keyed_stream(100, keys=10, seed=6))
    handled: list[bytes | None] = []
    seen = 0

    async def misuses_dead_letters(rec: Record) -> DeadLetter | None:
        nonlocal seen
        seen += 1
        # No dead-letter topic is configured: the engine stops this workload (a misuse).
        return DeadLetter("no place for it") if rec.json()["seq"] == 10 else None

    app = ConsumerApp(
        [
            workload(backend, broken_topic, "broken", misuses_dead_letters),
            workload(backend, healthy_topic, "healthy", collect(handled)),
        ],
        isolate=True,
    )
    running = asyncio.ensure_future(app.run())
    try:
        await until(lambda: "broken" in app.retired, what="the broken workload was retired")
        retired = app.retired["broken"]
        assert isinstance(retired.error, LanehouseError), retired
        assert "dead-letter" in str(retired.error)
        # Nothing at or above the failing record is committed (key order: one lane).
        assert backend.committed("g-broken", broken_topic, 1) == {0: 10}
        await until(lambda: len(handled) == 100, what="the healthy workload handled its 100")
        backend.produce(healthy_topic, keyed_stream(40, keys=10, seed=7))
        await until(lambda: len(handled) == 140, what="and goes on after its neighbour failed")
        assert set(app.runners) == {"healthy"}
    finally:
        app.request_stop()
        await running
    assert backend.committed("g-healthy", healthy_topic, 1) == {0: 140}


async def test_without_isolation_one_failure_still_stops_the_app() -> None:
    backend = MemoryBackend()
    topic = backend.make_topic(1)
    backend.produce(topic, keyed_stream(5, keys=1))

    async def misuse(rec: Record) -> DeadLetter:
        return DeadLetter("no place for it")

    app = ConsumerApp([workload(backend, topic, "alone", misuse)])
    with pytest.raises(LanehouseError, match="dead-letter"):
        await asyncio.wait_for(app.run(), 30)


async def test_runtime_changes_are_refused_with_a_reason() -> None:
    backend = MemoryBackend()
    topic = backend.make_topic(1)
    idle = workload(backend, topic, "idle", collect([]))
    app = ConsumerApp([idle], isolate=True)
    with pytest.raises(LanehouseError, match="not running"):
        await app.add(workload(backend, topic, "early", collect([])))
    running = asyncio.ensure_future(app.run())
    try:
        await until(lambda: bool(app.runners.get("idle") and app.runners["idle"].parts))
        with pytest.raises(LanehouseError, match="already runs"):
            await app.add(idle)
        with pytest.raises(LanehouseError, match="does not run"):
            await app.remove("nobody")
    finally:
        app.request_stop()
        await running
