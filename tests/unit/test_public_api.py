"""The public API stays honest: sorted, every name importable, no Dagster or Spark pulled in, and
the Python examples of the README and docs/ run as written."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

import pytest

import consumers
import spark_jobs

pytestmark = pytest.mark.unit

REPO = Path(__file__).resolve().parents[2]


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


DOCS = [Path("README.md"), *sorted(Path("docs").glob("*.md"))]
EXAMPLES = [
    (f"{path}#{i}", block)
    for path in DOCS
    for i, block in enumerate(re.findall(r"```python\n(.*?)```", (REPO / path).read_text(), re.S))
]


def test_the_docs_have_python_examples() -> None:
    assert len(EXAMPLES) >= 3  # the walk found the examples, so the test below checks something


@pytest.mark.parametrize(("where", "code"), EXAMPLES, ids=[where for where, _ in EXAMPLES])
def test_python_examples_in_the_docs_run(where: str, code: str) -> None:
    """Every ```python block of the README and docs/ runs as written: its imports resolve (a
    handler author's imports are the public face) and what it defines is valid. Compiled
    without this module's ``from __future__ import annotations``, as the reader's file would be
    (Dagster reads the annotations of an asset's ``context``)."""
    exec(compile(code, where, "exec", dont_inherit=True), {})
