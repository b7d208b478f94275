"""Interceptors run around every handler call, configured by import path in the spec."""

from __future__ import annotations

from pathlib import Path

import pytest

from consumers import ConsumerApp, Record, RunnerSettings, SpecError, Workload, load_spec
from consumers.dev.examples import CORRELATION_ID, CorrelationId
from consumers.execution.interceptors import load_interceptor
from consumers.service.launch import workload_from_spec
from tests.backends import MemoryBackend

pytestmark = pytest.mark.integration


async def test_correlation_id_reaches_the_handler_and_is_reset_after() -> None:
    backend = MemoryBackend()
    topic = backend.make_topic(1)
    for i in range(20):
        headers = [("correlation-id", f"req-{i}".encode())] if i % 2 == 0 else None
        backend.broker.produce(topic, b"{}", f"k{i % 3}".encode(), headers=headers)
    seen: dict[int, str | None] = {}
    calls: list[str] = []

    class Audit:
        def before(self, record: Record) -> None:
            calls.append(f"before {record.offset}")

        def after(self, record: Record, outcome: object, error: object) -> None:
            calls.append(f"after {record.offset}")

    async def handler(rec: Record) -> None:
        seen[rec.offset] = CORRELATION_ID.get()

    w = Workload(
        RunnerSettings(name="intercepted", concurrency=1),
        handler,
        [topic],
        backend.factory("g"),
        interceptors=(load_interceptor(CorrelationId), load_interceptor(Audit())),
    )
    [summary] = await ConsumerApp([w]).run(until_idle=0.5)

    assert summary.counters["completed"] == 20
    assert seen == {i: (f"req-{i}" if i % 2 == 0 else None) for i in range(20)}
    assert CORRELATION_ID.get() is None
    assert calls[:2] == ["before 0", "after 0"]


async def test_an_interceptor_that_raises_fails_the_attempt() -> None:
    backend = MemoryBackend()
    topic = backend.make_topic(1)
    backend.broker.produce(topic, b"{}", b"k")

    class Broken:
        def before(self, record: Record) -> None:
            raise RuntimeError("interceptor bug")

    async def handler(rec: Record) -> None:
        raise AssertionError("the handler must not run when before() failed")

    w = Workload(
        RunnerSettings(name="broken"),
        handler,
        [topic],
        backend.factory("g"),
        interceptors=(load_interceptor(Broken()),),
    )
    [summary] = await ConsumerApp([w]).run(until_idle=0.5)
    assert summary.counters["failed"] >= 1 and summary.counters["completed"] == 0


def test_spec_interceptors_are_imported_and_checked(tmp_path: Path) -> None:
    base = (
        "name: w\nsource: {kind: kafka, bootstrap_servers: x, topics: [t]}\n"
        "handler: consumers.dev.examples:enrich\n"
    )
    good = tmp_path / "good.yaml"
    good.write_text(base + "interceptors: [consumers.dev.examples:CorrelationId]\n")
    assert len(workload_from_spec(load_spec(good)).interceptors) == 1
    bad = tmp_path / "bad.yaml"
    bad.write_text(base + "interceptors: [consumers.dev.examples:NoSuchThing]\n")
    with pytest.raises(SpecError, match=r"interceptors\[0\]"):
        load_spec(bad)


def test_an_object_without_hooks_is_not_an_interceptor(tmp_path: Path) -> None:
    spec = tmp_path / "hookless.yaml"
    spec.write_text(
        "name: w\nsource: {kind: kafka, bootstrap_servers: x, topics: [t]}\n"
        "handler: consumers.dev.examples:enrich\ninterceptors: [consumers.dev.examples:enrich]\n"
    )
    with pytest.raises(SpecError, match=r"interceptors\[0\].*not an interceptor"):
        load_spec(spec)
