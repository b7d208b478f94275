"""The engine's guarantees for every executor of a plain ``def`` handler (``auto``: threads,
then inline once proven fast; ``thread``; ``process``), in memory and on a real Tansu broker:
per-key order across retries, at-least-once, dead letters with the handler's own error type,
timeouts, and a drain that commits only what finished."""

from __future__ import annotations

import asyncio
import json
from typing import Any, NamedTuple

import pytest

from consumers import (
    ConsumerApp,
    DeadLetterPolicy,
    RetryPolicy,
    RunnerSettings,
    Workload,
    WorkloadSummary,
)
from consumers.engine.dead_letter_headers import DeadLetterInfo, decode_dead_letter
from consumers.execution.interceptors import load_interceptor
from tests import executor_handlers as h
from tests.backends import Backend, MemoryBackend, Stored, keyed_stream
from tests.helpers import until

pytestmark = [pytest.mark.integration, pytest.mark.slow]

EXECUTORS = ["auto", "thread", "process"]
FAST_RETRY = RetryPolicy(max_attempts=3, backoff=0.01, jitter=False)


@pytest.fixture
def backend(kafka_backend: Backend) -> Backend:
    """In memory and on Tansu (the handler's side; Pulsar's is the same engine path)."""
    return kafka_backend


def workload(
    backend: Backend, topic: str, group: str, handler: Any, check: h.OrderCheck, **settings: Any
) -> Workload:
    defaults = {"name": "executors", "commit_interval": 0.05, "drain_timeout": 10.0}
    if settings.get("executor") == "process":
        defaults["processes"] = 2
    return Workload(
        RunnerSettings(**{**defaults, **settings}),
        handler,
        [topic],
        backend.factory(group),
        producer_factory=backend.producer_factory(),
        interceptors=(load_interceptor(check),),
    )


async def run(w: Workload) -> WorkloadSummary:
    [summary] = await ConsumerApp([w]).run(until_idle=1.0)
    return summary


@pytest.mark.parametrize("executor", EXECUTORS)
async def test_key_order_across_retries_and_everything_committed(
    backend: Backend, executor: str
) -> None:
    topic = backend.make_topic(4)
    records = keyed_stream(2000, keys=40)
    backend.produce(topic, records)
    check = h.OrderCheck()

    w = workload(backend, topic, "g-order", h.work, check, executor=executor, retry=FAST_RETRY)
    summary = await run(w)

    ends = backend.log_end(topic, 4)
    failing = sum(len(range(h.FAIL_AT, end, h.FAIL_EVERY)) for end in ends.values())
    assert check.violations == []
    assert sorted(check.completed) == sorted(v for _, v in records)
    assert summary.counters["failed"] == summary.counters["retries"] == failing
    assert summary.counters["completed"] == len(records)
    assert backend.committed("g-order", topic, 4) == ends


class PoisonRun(NamedTuple):
    dead: list[Stored]
    first: DeadLetterInfo
    summary: WorkloadSummary
    check: h.OrderCheck
    healthy: list[bytes]


async def poison_run(
    backend: Backend, handler: Any, executor: str, group: str, poison: int
) -> PoisonRun:
    """``poison`` records of key ``h.POISON`` ahead of a healthy stream, through a workload
    that dead-letters after 3 attempts; what reached the dead-letter topic, and the rest."""
    topic, dlq = backend.make_topic(2), backend.make_topic(1)
    bad = [(h.POISON, json.dumps({"key": "poison", "seq": i}).encode()) for i in range(poison)]
    healthy = keyed_stream(300, keys=30, seed=2)
    backend.produce(topic, bad + healthy)
    check = h.OrderCheck()
    w = workload(
        backend,
        topic,
        group,
        handler,
        check,
        executor=executor,
        retry=FAST_RETRY,
        dead_letter=DeadLetterPolicy(dlq, max_ratio=0.5, window=100),
    )
    summary = await run(w)
    assert backend.committed(group, topic, 2) == backend.log_end(topic, 2)
    dead = [r for part in backend.read(dlq, 1) for r in part]
    first = decode_dead_letter(list(dead[0].headers.items()))
    return PoisonRun(dead, first, summary, check, [v for _, v in healthy])


@pytest.mark.parametrize("executor", EXECUTORS)
async def test_poison_records_dead_letter_with_their_own_error_type(
    backend: Backend, executor: str
) -> None:
    out = await poison_run(backend, h.poison, executor, "g-dlq", poison=3)

    assert [json.loads(r.value or b"")["seq"] for r in out.dead] == [0, 1, 2]
    assert (out.first.error_type, out.first.attempts) == ("ValueError", 3)
    assert "poison pill" in out.first.error_message
    assert out.check.violations == []
    assert sorted(out.check.completed) == sorted(out.healthy)
    assert out.summary.counters["dead_lettered"] == 3


@pytest.mark.parametrize("executor", [*EXECUTORS, "async"])
async def test_system_exit_and_keyboard_interrupt_fail_only_their_record(
    executor: str, caplog: pytest.LogCaptureFixture
) -> None:
    """What would end the process is one failed attempt: retried, then dead-lettered with its
    type, the record's place in the log, and every other record handled. In memory: the
    reliability suite's poison fault raises SystemExit on Tansu for each executor."""
    handler = h.exits_async if executor == "async" else h.exits
    runs_on = "auto" if executor == "async" else executor
    out = await poison_run(MemoryBackend(), handler, runs_on, f"g-exit-{executor}", poison=2)

    dead = [decode_dead_letter(list(r.headers.items())) for r in out.dead]
    assert [json.loads(r.value or b"")["seq"] for r in out.dead] == [0, 1]
    assert [(d.error_type, d.attempts) for d in dead] == [
        ("SystemExit", 3),
        ("KeyboardInterrupt", 3),
    ]
    assert sorted(out.check.completed) == sorted(out.healthy)
    failed = [r.getMessage() for r in caplog.records if "SystemExit" in r.getMessage()]
    assert failed and all("handler failed on " in m and "key=b'poison'" in m for m in failed)


@pytest.mark.parametrize("executor", EXECUTORS)
async def test_a_timed_out_call_fails_and_its_retry_completes(
    backend: Backend, executor: str
) -> None:
    topic = backend.make_topic(1)
    records = keyed_stream(200, keys=10, seed=3)
    backend.produce(topic, records)
    check = h.OrderCheck()

    # 1 s: a clean-clone run under four workers timed out three fast first calls at 0.3 s.
    w = workload(backend, topic, "g-timeout", h.slow_once, check, executor=executor, timeout=1.0)
    summary = await run(w)

    assert summary.counters["timeouts"] == 1
    assert summary.counters["completed"] == len(records)
    assert check.violations == []
    assert backend.committed("g-timeout", topic, 1) == {0: len(records)}


@pytest.mark.parametrize("executor", EXECUTORS)
async def test_a_stop_drains_commits_what_finished_and_a_restart_loses_nothing(
    backend: Backend, executor: str
) -> None:
    topic = backend.make_topic(2)
    records = keyed_stream(1500, keys=50, seed=4)
    backend.produce(topic, records)
    first = h.OrderCheck()
    w = workload(backend, topic, "g-stop", h.paced, first, executor=executor, concurrency=20)
    app = ConsumerApp([w])
    running = asyncio.ensure_future(app.run())
    await until(lambda: len(first.completed) >= 200)
    app.request_stop()
    [stopped] = await running

    committed = backend.committed("g-stop", topic, 2)
    assert 0 < sum(committed.values()) <= stopped.counters["completed"] < len(records)
    second = h.OrderCheck()
    await run(workload(backend, topic, "g-stop", h.paced, second, executor=executor))
    # At least once: every record completed in one of the runs, and nothing below the first
    # run's commit ran again.
    below = {
        r.value
        for part in backend.read(topic, 2)
        for r in part
        if r.offset < committed[r.partition]
    }
    assert below <= set(first.completed)
    assert below.isdisjoint(second.completed)
    assert set(first.completed) | set(second.completed) == {v for _, v in records}
    assert first.violations == []
    assert backend.committed("g-stop", topic, 2) == backend.log_end(topic, 2)
