"""Which loop the engine runs on, and the errors for a wrong choice."""

from __future__ import annotations

import asyncio
import gc
import importlib.util

import pytest

from consumers.engine import event_loop


async def _loop_type() -> str:
    return type(asyncio.get_running_loop()).__module__


def test_uvloop_is_the_default_when_installed(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv(event_loop.ENV, raising=False)
    assert event_loop.loop_kind() == "uvloop"
    assert event_loop.run(_loop_type()).startswith("uvloop")


def test_asyncio_opts_out(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(event_loop.ENV, " AsyncIO ")
    assert event_loop.run(_loop_type()).startswith("asyncio")


def test_an_unknown_loop_is_a_clear_error(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(event_loop.ENV, "trio")
    coro = _loop_type()
    with pytest.raises(RuntimeError, match="must be 'uvloop' or 'asyncio', not 'trio'"):
        event_loop.run(coro)
    coro.close()


def test_asking_for_a_missing_uvloop_is_a_clear_error(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(event_loop.ENV, "uvloop")
    monkeypatch.setattr(importlib.util, "find_spec", lambda name: None)  # the module's own
    with pytest.raises(RuntimeError, match="uvloop is not installed"):
        event_loop.loop_kind()


async def _gc_state() -> tuple[tuple[int, int, int], int]:
    return gc.get_threshold(), gc.get_freeze_count()


def test_the_engine_runs_with_a_tuned_collector_and_restores_it() -> None:
    before = gc.get_threshold()
    thresholds, frozen = event_loop.run(_gc_state())
    assert thresholds == event_loop.GC_THRESHOLDS
    assert frozen > 0
    assert gc.get_threshold() == before
    assert gc.get_freeze_count() == 0
