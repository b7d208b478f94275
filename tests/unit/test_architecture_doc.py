"""docs/architecture.md is the map of the house: every module of the three packages has a row
(or is named in one), so a module added without a word there fails here."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
DOC = (REPO / "docs" / "architecture.md").read_text()
MODULES = sorted(
    path.relative_to(REPO)
    for package in ("consumers", "orchestration", "spark_jobs")
    for path in (REPO / package).rglob("*.py")
    if path.name != "__init__.py"
)


def named(module: Path) -> bool:
    """By its path, or by its file name in backticks within a row of its own package."""
    if f"`{module.as_posix()}" in DOC:
        return True
    package = module.parts[0]
    pattern = re.compile(rf"`{re.escape(module.name)}`")
    return any(
        line.startswith("|") and f"`{package}/" in line and pattern.search(line)
        for line in DOC.splitlines()
    )


def test_the_packages_have_modules() -> None:
    assert len(MODULES) > 50  # the walk found the tree, so the test below checks something


@pytest.mark.parametrize("module", MODULES, ids=str)
def test_every_module_is_on_the_map(module: Path) -> None:
    assert named(module), f"{module} is missing from docs/architecture.md's module tables"
