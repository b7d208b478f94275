"""`make demo` (the README's main command) stays true: it runs and its checks pass."""

from __future__ import annotations

import io

import pytest
from rich.console import Console

from orchestration.demo import run_demo

pytestmark = pytest.mark.integration


def test_demo_runs_and_verifies_itself() -> None:
    out = io.StringIO()
    assert run_demo(records=3000, keys=50, partitions=2, console=Console(file=out, width=120))
    text = out.getvalue()
    assert "3,000 / 3,000" in text and "NO" not in text
