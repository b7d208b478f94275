"""``executor: process`` when things go wrong: a handler that kills its worker, a worker killed
from outside, a record too large to hand off, a handler workers cannot import, and a ``kill -9``
of the consumer while its workers are busy. Each ends in a clear error or outcome, with nothing
lost, key order kept and no hang (the contract cases every executor shares are in
test_executor_contract.py)."""

from __future__ import annotations

import asyncio
import json
import os
import signal
import sys
from pathlib import Path

import pytest

from consumers import ConsumerApp, DeadLetterPolicy, ProcessExecutorError, RetryPolicy
from consumers.dev.embedded.tansu import TansuBroker
from consumers.dev.sample import produce_sample
from consumers.engine.dead_letter_headers import decode_dead_letter
from consumers.execution.processes import ProcessExecutor
from tests import executor_handlers as h
from tests.backends import (
    Backend,
    MemoryBackend,
    assert_all_committed,
    keyed_stream,
)
from tests.helpers import until, wait_until
from tests.integration.test_executor_contract import poison_run, run, workload
from tests.support.processes import (
    assert_complete,
    finish,
    lines,
    start_consumer,
    write_spec,
)

pytestmark = [pytest.mark.integration, pytest.mark.slow]

FAST_RETRY = RetryPolicy(max_attempts=3, backoff=0.01, jitter=False)


@pytest.fixture
def backend(kafka_backend: Backend) -> Backend:
    """In memory and on Tansu (the handler's side; Pulsar's is the same engine path)."""
    return kafka_backend


def running(pid: int) -> bool:
    """Alive and not a zombie (an orphan's exit is reaped by whatever adopted it, maybe never)."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return False
    return stat.rsplit(")", 1)[1].split()[0] != "Z"


def worker_pids(parent: int) -> set[int]:
    """Live handler worker processes whose parent is ``parent`` (from /proc)."""
    pids = set()
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            stat = (entry / "stat").read_text()
            cmdline = (entry / "cmdline").read_bytes()
        except OSError:
            continue
        fields = stat.rsplit(")", 1)[1].split()
        state, ppid = fields[0], int(fields[1])
        if ppid == parent and state != "Z" and b"consumers.execution.process_worker" in cmdline:
            pids.add(int(entry.name))
    return pids


async def test_a_worker_crash_fails_its_record_which_is_retried_in_key_order(
    backend: Backend,
) -> None:
    topic = backend.make_topic(2)
    records = keyed_stream(400, keys=20, seed=5)
    backend.produce(topic, records)
    check = h.OrderCheck()

    w = workload(
        backend, topic, "g-crash", h.crash_once, check, executor="process", retry=FAST_RETRY
    )
    summary = await run(w)

    crashed = sum(1 for end in backend.log_end(topic, 2).values() if end > h.CRASH_OFFSET)
    assert summary.counters["failed"] == summary.counters["retries"] == crashed
    assert summary.counters["completed"] == len(records)
    assert check.violations == []
    assert sorted(check.completed) == sorted(v for _, v in records)
    assert backend.committed("g-crash", topic, 2) == backend.log_end(topic, 2)


async def test_a_key_that_always_kills_its_worker_is_dead_lettered_as_worker_died() -> None:
    out = await poison_run(MemoryBackend(), h.crash_poison, "process", "g-crash-dlq", poison=2)

    assert [json.loads(r.value or b"")["seq"] for r in out.dead] == [0, 1]
    assert (out.first.error_type, out.first.attempts) == ("WorkerDied", 3)
    assert "exited with code 3" in out.first.error_message
    assert sorted(out.check.completed) == sorted(out.healthy)
    assert out.summary.counters["dead_lettered"] == 2
    assert out.check.violations == []


async def test_a_reply_the_consumer_cannot_unpickle_fails_only_its_own_record() -> None:
    """The worker sends it (it pickles); loading it here fails. Before, the frame stayed at the
    head of the reader's buffer and every later reply of that worker waited forever."""
    out = await poison_run(MemoryBackend(), h.unreadable_poison, "process", "g-unreadable", 2)

    assert [json.loads(r.value or b"")["seq"] for r in out.dead] == [0, 1]
    assert (out.first.error_type, out.first.attempts) == ("ReplyUnreadable", 3)
    assert "cannot be unpickled here: TypeError" in out.first.error_message
    assert sorted(out.check.completed) == sorted(out.healthy)
    assert out.check.violations == []


async def test_a_worker_killed_from_outside_is_replaced_and_nothing_is_lost(
    backend: Backend,
) -> None:
    topic = backend.make_topic(2)
    records = keyed_stream(1500, keys=50, seed=7)
    backend.produce(topic, records)
    check = h.OrderCheck()
    w = workload(
        backend, topic, "g-kill-worker", h.paced, check, executor="process", retry=FAST_RETRY
    )
    app = ConsumerApp([w])
    running = asyncio.ensure_future(app.run(until_idle=1.0))
    await until(lambda: len(check.completed) >= 200)
    before = worker_pids(os.getpid())
    assert len(before) == 2
    victim = min(before)
    os.kill(victim, signal.SIGKILL)
    await until(lambda: len(worker_pids(os.getpid()) - before) == 1)
    [summary] = await running

    assert summary.counters["failed"] == summary.counters["retries"] <= 1
    assert summary.counters["completed"] == len(records)
    assert check.violations == []
    assert sorted(check.completed) == sorted(v for _, v in records)
    assert backend.committed("g-kill-worker", topic, 2) == backend.log_end(topic, 2)
    assert worker_pids(os.getpid()) == set(), "workers outlived their consumer"


async def test_a_record_too_large_for_the_hand_off_is_dead_lettered_unsent() -> None:
    backend = MemoryBackend()
    topic, dlq = backend.make_topic(1), backend.make_topic(1)
    big = (b"big", json.dumps({"key": "big", "seq": 0, "pad": "x" * 4000}).encode())
    records = [*keyed_stream(100, keys=10, seed=8), big]
    backend.produce(topic, records)
    check = h.OrderCheck()

    w = workload(
        backend,
        topic,
        "g-big",
        h.work,
        check,
        executor="process",
        max_handoff_bytes=2048,
        retry=FAST_RETRY,
        dead_letter=DeadLetterPolicy(dlq, max_ratio=0.5, window=100),
    )
    summary = await run(w)

    [dead] = [r for part in backend.read(dlq, 1) for r in part]
    assert dead.value == big[1]
    info = decode_dead_letter(list(dead.headers.items()))
    assert info.error_type == "HandoffTooLarge"
    assert "above the process hand-off limit of 2,048" in info.error_message
    assert sorted(check.completed) == sorted(v for _, v in records[:-1])
    assert summary.counters["dead_lettered"] == 1
    assert backend.committed("g-big", topic, 1) == {0: len(records)}


async def test_a_handler_workers_cannot_import_fails_at_start(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Importable here, gone by the time a worker imports it (as when the consumer's and the
    # workers' environments differ).
    (tmp_path / "vanishing_handler.py").write_text("def handle(rec):\n    return None\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    from vanishing_handler import handle  # type: ignore[import-not-found]

    (tmp_path / "vanishing_handler.py").unlink()
    try:
        with pytest.raises(ProcessExecutorError) as info:
            ProcessExecutor(handle, 2, "vanishing", 1024)
    finally:
        del sys.modules["vanishing_handler"]
    assert "failed to start: cannot import the handler" in str(info.value)
    assert "No module named 'vanishing_handler'" in str(info.value)
    assert worker_pids(os.getpid()) == set()


async def test_an_unpicklable_handler_is_refused_before_any_worker_starts() -> None:
    def handle(rec: object) -> None:
        return None

    with pytest.raises(ProcessExecutorError, match="cannot be pickled"):
        ProcessExecutor(handle, 2, "local", 1024)
    assert worker_pids(os.getpid()) == set()


def test_kill_9_of_the_consumer_while_workers_are_busy_loses_nothing(
    kafka_broker: TansuBroker, topic_factory, tmp_path: Path
) -> None:
    topic = topic_factory(4)
    count, keys = 6000, 100
    produce_sample(kafka_broker.bootstrap, topic, count, keys)
    spec = write_spec(
        tmp_path / "spec.yaml",
        kafka_broker,
        topic,
        "g-kill-process",
        concurrency=20,
        handler="record_sync",
        extra="executor: process\nprocesses: 2\n",
    )
    first, second = tmp_path / "run1.txt", tmp_path / "run2.txt"

    proc = start_consumer(spec, first, 0.002)
    wait_until(lambda: lines(first) >= 1000, timeout=60, message="first run made progress")
    workers = worker_pids(proc.pid)
    assert len(workers) == 2
    proc.kill()  # SIGKILL: no drain, no final commit, no goodbye to the workers
    proc.wait(timeout=10)
    assert lines(first) < count, "the first run finished before it was killed"
    # A worker sees its socket close and exits; none is left running the handler.
    wait_until(
        lambda: not any(running(pid) for pid in workers),
        timeout=10,
        message="orphaned workers exited",
    )

    finish(start_consumer(spec, second, 0.0, "--until-idle", "2"))

    assert_complete([first, second], count, keys)
    assert_all_committed(kafka_broker.bootstrap, "g-kill-process", topic, 4)
