"""Every engine counter reaches Prometheus, under one name family."""

from __future__ import annotations

from dataclasses import fields

import pytest

from consumers.engine.counters import WorkloadCounters
from consumers.service.metrics import COUNTERS

pytestmark = pytest.mark.unit


def test_every_workload_counter_is_exported() -> None:
    names = {f.name for f in fields(WorkloadCounters)}
    missing = names - set(COUNTERS)
    assert missing == set(), f"counters without a metric: {sorted(missing)}"
