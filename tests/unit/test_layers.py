"""The house's rules, read from the source: no import circles, the arrows between the
rooms point down (``consumers/`` in tiers, so a backend never imports the engine, landing or
config, and the engine never the admin rooms; the platform's rooms under ``orchestration/``
never the local platform, the CLI or the assembly), no two rooms importing each other, and no
module past 400 lines.

Every import counts, also those under ``TYPE_CHECKING`` and inside functions: a circle a type
checker walks is still a circle a reader walks."""

from __future__ import annotations

import ast
from collections.abc import Iterator
from pathlib import Path

import pytest

pytestmark = pytest.mark.unit

REPO = Path(__file__).resolve().parents[2]
PACKAGES = ("consumers", "orchestration", "spark_jobs")


def module_name(path: Path) -> str:
    parts = path.relative_to(REPO).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


MODULES = {
    module_name(path): path for package in PACKAGES for path in (REPO / package).rglob("*.py")
}


def imports(name: str) -> Iterator[str]:
    """The project modules ``name`` imports (``from a import b`` counts ``a.b`` when it is a
    module, else ``a``)."""
    for node in ast.walk(ast.parse(MODULES[name].read_text())):
        if isinstance(node, ast.Import):
            found = [alias.name for alias in node.names]
        elif isinstance(node, ast.ImportFrom) and node.module and not node.level:
            found = [
                f"{node.module}.{alias.name}"
                if f"{node.module}.{alias.name}" in MODULES
                else node.module
                for alias in node.names
            ]
        else:
            continue
        yield from (target for target in found if target in MODULES and target != name)


GRAPH = {name: sorted(set(imports(name))) for name in MODULES}


def test_the_walk_found_the_house() -> None:
    assert len(MODULES) > 80
    assert "consumers.engine.source" in GRAPH["consumers.service.app"]


def test_no_import_circles() -> None:
    """Package ``__init__`` files that re-export the public face are left out: importing a
    package's face from inside it is not a circle between two mechanisms."""
    faces = {name for name, path in MODULES.items() if path.name == "__init__.py"}
    state: dict[str, str] = {}
    circles: list[list[str]] = []

    def visit(name: str, trail: list[str]) -> None:
        state[name] = "open"
        for target in GRAPH[name]:
            if target in faces:
                continue
            if state.get(target) == "open":
                circles.append([*trail[trail.index(target) :], target])
            elif target not in state:
                visit(target, [*trail, target])
        state[name] = "done"

    for name in sorted(MODULES):
        if name not in state and name not in faces:
            visit(name, [name])
    assert circles == []


#: orchestration's rooms from the bottom up: each may import only those before it.
_ORCHESTRATION = (
    "lake",
    "workloads",
    "platform",
    "shop",
    "demo",
    "local",
    "definitions",
    "cli",
)
_ABOVE = {
    f"orchestration.{room}": tuple(f"orchestration.{r}" for r in _ORCHESTRATION[i + 1 :])
    for i, room in enumerate(_ORCHESTRATION)
}

#: consumers/'s rooms in tiers from the bottom up (docs/architecture.md draws them): a room may
#: import the rooms of lower tiers only, never one of its own tier or above.
_CONSUMERS = (
    ("record", "outcomes", "errors", "clock"),
    ("backends",),
    ("execution", "permits", "landing"),
    ("engine",),
    ("config",),
    ("dead_letters", "rewind", "scaling", "dev"),
    ("service",),
)


def _not_below(tier: int, room: str) -> tuple[str, ...]:
    """The rooms ``room`` must not import: its own tier's others (but the base tier's modules
    may import each other: ``outcomes`` names ``errors``) and every tier above."""
    same = () if tier == 0 else tuple(r for r in _CONSUMERS[tier] if r != room)
    above = tuple(r for rooms in _CONSUMERS[tier + 1 :] for r in rooms)
    return tuple(f"consumers.{r}" for r in (*same, *above))


_NOT_BELOW = {
    f"consumers.{room}": _not_below(tier, room)
    for tier, rooms in enumerate(_CONSUMERS)
    for room in rooms
}

#: room -> rooms it must never import (the arrows point down).
FORBIDDEN = {
    "consumers": ("orchestration.", "spark_jobs."),
    **_NOT_BELOW,
    # orchestration/, bottom up: settings and graphql, lake, workloads, the public platform,
    # the shop's pipeline (a user of the platform's public surface only), the demo, the local
    # platform, the assembly (definitions.py), the CLI.
    "orchestration.settings": ("orchestration.",),
    "orchestration.lake": _ABOVE["orchestration.lake"],
    "orchestration.workloads": _ABOVE["orchestration.workloads"],
    "orchestration.platform": _ABOVE["orchestration.platform"],
    "orchestration.shop": (
        *_ABOVE["orchestration.shop"],
        "orchestration.lake",
        "orchestration.workloads",
    ),
    "orchestration.demo": _ABOVE["orchestration.demo"],
    "orchestration.local": _ABOVE["orchestration.local"],
    "orchestration.definitions": _ABOVE["orchestration.definitions"],
    "orchestration.graphql": ("orchestration.",),
}


@pytest.mark.parametrize("room", sorted(FORBIDDEN))
def test_imports_point_down(room: str) -> None:
    wrong = [
        f"{name} -> {target}"
        for name in GRAPH
        if name == room or name.startswith(room + ".")
        for target in GRAPH[name]
        if target.startswith(FORBIDDEN[room])
    ]
    assert wrong == []


def room_of(name: str) -> str:
    """``consumers.engine.source`` -> ``consumers.engine``; a top-level module is its own room."""
    return ".".join(name.split(".")[:2])


def test_no_two_way_room_dependencies() -> None:
    """Rooms, not only modules, depend one way: two rooms importing each other are one room
    split in two, or a mechanism in the wrong room."""
    arrows = {
        (room_of(name), room_of(target))
        for name, targets in GRAPH.items()
        for target in targets
        if room_of(name) != room_of(target)
    }
    assert sorted(f"{a} <-> {b}" for a, b in arrows if (b, a) in arrows and a < b) == []


def test_every_module_is_at_most_400_lines() -> None:
    """One mechanism per module: past 400 lines a module is probably two."""
    long = {
        name: lines
        for name, path in MODULES.items()
        if (lines := len(path.read_text().splitlines())) > 400
    }
    assert long == {}
