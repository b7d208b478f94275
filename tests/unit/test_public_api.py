"""The public API stays honest: sorted, every name importable, no Dagster or Spark pulled in."""

from __future__ import annotations

import subprocess
import sys

import pytest

import consumers
import spark_jobs

pytestmark = pytest.mark.unit


@pytest.mark.parametrize("package", [consumers, spark_jobs], ids=lambda p: p.__name__)
def test_all_is_sorted_and_every_name_exists(package: object) -> None:
    names = package.__all__  # type: ignore[attr-defined]
    assert names == sorted(names)
    assert [name for name in names if not hasattr(package, name)] == []


def test_engine_does_not_import_dagster_or_spark() -> None:
    code = "import sys, consumers; print(sorted({'dagster', 'pyspark'} & set(sys.modules)))"
    out = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, check=True, timeout=60
    )
    assert out.stdout.strip() == "[]"
