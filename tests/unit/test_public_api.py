"""The public API stays honest: sorted, every name importable, no Dagster or Spark pulled in."""

from __future__ import annotations

import subprocess
import sys

import pytest

import consumers

pytestmark = pytest.mark.unit


def test_all_is_sorted_and_every_name_exists() -> None:
    assert consumers.__all__ == sorted(consumers.__all__)
    missing = [name for name in consumers.__all__ if not hasattr(consumers, name)]
    assert missing == []


def test_engine_does_not_import_dagster_or_spark() -> None:
    code = "import sys, consumers; print(sorted({'dagster', 'pyspark'} & set(sys.modules)))"
    out = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, check=True, timeout=60
    )
    assert out.stdout.strip() == "[]"
