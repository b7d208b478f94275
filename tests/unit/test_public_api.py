"""The public API stays honest and closed: sorted, equal to the public names of the package, every
type an export takes or returns exported too, tests importing public names from the face, no
Dagster or Spark pulled in, and the Python examples of the README and docs/ run as written."""

from __future__ import annotations

import ast
import dataclasses
import inspect
import re
import subprocess
import sys
import types
import typing
from collections.abc import Iterator
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


def test_all_is_every_public_name_of_the_face() -> None:
    """What ``consumers`` binds publicly (submodules aside) is what ``__all__`` lists: a name
    imported into the face without being exported, or exported without being there, fails."""
    public = {
        name
        for name, value in vars(consumers).items()
        if not name.startswith("_") and not isinstance(value, types.ModuleType)
    }
    assert sorted(public) == consumers.__all__


def _project_types(hint: object) -> Iterator[type]:
    """The classes of ``consumers`` a type hint names, through unions and generics."""
    if isinstance(hint, list):  # Callable's parameter list
        for item in hint:
            yield from _project_types(item)
        return
    for arg in typing.get_args(hint):
        yield from _project_types(arg)
    if isinstance(hint, type) and hint.__module__.startswith("consumers"):
        yield hint


def _signatures(obj: object) -> Iterator[tuple[str, object]]:
    """``(where, hint)`` for an export's fields, constructor and public methods, or its
    parameters and result when it is a function."""
    owner = getattr(obj, "__name__", repr(obj))
    hints = lambda f: typing.get_type_hints(f, localns=vars(consumers))  # noqa: E731
    if not inspect.isclass(obj):
        if callable(obj):
            yield from ((f"{owner}({k})", v) for k, v in hints(obj).items())
        return
    if dataclasses.is_dataclass(obj) or hasattr(obj, "model_fields"):
        yield from ((f"{owner}.{k}", v) for k, v in hints(obj).items() if not k.startswith("_"))
    for name, member in inspect.getmembers(obj, inspect.isfunction):
        if (name == "__init__" or not name.startswith("_")) and member.__module__.startswith(
            "consumers"
        ):
            yield from ((f"{owner}.{name}({k})", v) for k, v in hints(member).items())


def test_every_type_an_export_takes_or_returns_is_exported() -> None:
    """A user can build every exported setting and call every exported function with names from
    ``consumers`` alone (``RunnerSettings`` needs ``RetryPolicy``, ``load_spec`` takes a
    ``PlatformConfig``, ...)."""
    missing = {
        f"{kind.__module__}.{kind.__qualname__} (in {where})"
        for name in consumers.__all__
        for where, hint in _signatures(getattr(consumers, name))
        for kind in _project_types(hint)
        if kind.__qualname__ not in consumers.__all__
    }
    assert sorted(missing) == []


def test_every_error_class_is_exported() -> None:
    from consumers import errors

    classes = {
        name
        for name, value in vars(errors).items()
        if isinstance(value, type)
        and issubclass(value, Exception)
        and value.__module__ == errors.__name__
        and not name.startswith("_")
    }
    assert sorted(classes - set(consumers.__all__)) == []


def _deep_imports_of_public_names(path: Path) -> Iterator[str]:
    for node in ast.walk(ast.parse(path.read_text())):
        if (
            isinstance(node, ast.ImportFrom)
            and node.module
            and node.module.startswith("consumers.")
            and not node.level
        ):
            for alias in node.names:
                if alias.name in consumers.__all__:
                    yield f"{path.relative_to(REPO)}: {alias.name} from {node.module}"


def test_users_import_public_names_from_the_face() -> None:
    """The engine's users (the platform, the Spark jobs, tests, benches, the example handlers)
    write ``from consumers import Record``: a public name reached through its module would
    break for them when the module moves."""
    files = [
        *(
            path
            for folder in ("orchestration", "spark_jobs", "tests", "bench")
            for path in sorted((REPO / folder).rglob("*.py"))
        ),
        REPO / "consumers" / "dev" / "examples.py",
    ]
    assert len(files) > 50
    assert [line for path in files for line in _deep_imports_of_public_names(path)] == []


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
