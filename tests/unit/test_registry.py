"""The workload registry keeps every valid spec and reports every invalid file on its own."""

from __future__ import annotations

import os
import time
from pathlib import Path

import pytest

from orchestration.workloads.registry import InvalidSpec, SpecCache, read_registry

SPEC = """\
name: {name}
source:
  kind: kafka
  bootstrap_servers: ${{KAFKA:-127.0.0.1:9092}}
  topics: [{name}-in]
handler: {handler}
concurrency: {concurrency}
"""


def write(directory: Path, file: str, name: str, concurrency: int = 10, **kw: str) -> Path:
    path = directory / file
    handler = kw.get("handler", "consumers.dev.examples:enrich")
    path.write_text(SPEC.format(name=name, concurrency=concurrency, handler=handler))
    return path


def test_valid_specs_are_kept_and_each_invalid_file_reported(tmp_path: Path) -> None:
    write(tmp_path, "b.yaml", "orders")
    write(tmp_path, "a.yml", "clicks")
    write(tmp_path, "bad.yaml", "broken", concurrency=0)
    (tmp_path / "junk.yaml").write_text("name: [unclosed\n")
    (tmp_path / "notes.txt").write_text("not a spec")
    # Handlers are not imported: a missing module is the run's error, not the registry's.
    write(tmp_path, "later.yaml", "later", handler="no_such_module:handle")

    registry = read_registry(tmp_path, env={})
    assert list(registry.workloads) == ["clicks", "later", "orders"]
    orders = registry.workloads["orders"]
    assert (orders.file, orders.spec.concurrency) == (str(tmp_path / "b.yaml"), 10)
    assert len(orders.hash) == 16
    assert [spec.name for spec in registry.specs()] == ["clicks", "later", "orders"]
    bad, junk = registry.invalid
    assert bad == InvalidSpec(
        str(tmp_path / "bad.yaml"),
        "concurrency",
        "Input should be greater than or equal to 1",
        "broken",
    )
    assert (junk.file, junk.field, junk.name) == (str(tmp_path / "junk.yaml"), "", None)
    assert junk.reason.startswith("invalid YAML")
    assert (
        str(bad)
        == f"{tmp_path / 'bad.yaml'}: concurrency: Input should be greater than or equal to 1"
    )


def test_a_name_declared_twice_invalidates_both_files(tmp_path: Path) -> None:
    write(tmp_path, "orders.yaml", "orders")
    write(tmp_path, "orders-copy.yaml", "orders", concurrency=99)
    write(tmp_path, "clicks.yaml", "clicks")
    registry = read_registry(tmp_path, env={})
    assert list(registry.workloads) == ["clicks"]
    assert [(i.file, i.field, i.name) for i in registry.invalid] == [
        (str(tmp_path / "orders-copy.yaml"), "name", "orders"),
        (str(tmp_path / "orders.yaml"), "name", "orders"),
    ]
    assert str(tmp_path / "orders.yaml") in registry.invalid[0].reason


def test_missing_directory_raises_and_empty_directory_is_empty(tmp_path: Path) -> None:
    with pytest.raises(FileNotFoundError, match="does not exist"):
        read_registry(tmp_path / "nope")
    assert read_registry(tmp_path).workloads == {}


def test_cache_rereads_a_file_only_when_it_or_the_environment_changes(tmp_path: Path) -> None:
    path = write(tmp_path, "orders.yaml", "orders")
    cache = SpecCache()
    first = read_registry(tmp_path, env={}, cache=cache)
    assert (
        read_registry(tmp_path, env={}, cache=cache).workloads["orders"]
        is first.workloads["orders"]
    )

    write(tmp_path, "orders.yaml", "orders", concurrency=11)
    os.utime(path, ns=(time.time_ns(), time.time_ns() + 1_000_000))  # a distinct mtime
    changed = read_registry(tmp_path, env={}, cache=cache).workloads["orders"]
    assert changed.spec.concurrency == 11

    moved = read_registry(tmp_path, env={"KAFKA": "k:1"}, cache=cache).workloads["orders"]
    assert moved.spec.source.bootstrap_servers == "k:1"  # type: ignore[union-attr]

    path.unlink()
    assert read_registry(tmp_path, env={}, cache=cache).workloads == {}
    assert len(cache) == 0


def test_two_hundred_specs_read_well_under_a_second(tmp_path: Path) -> None:
    for number in range(200):
        write(tmp_path, f"w{number:03}.yaml", f"w{number:03}")
    cache = SpecCache()
    # CPU seconds of this thread: the reads' work, whatever else the machine runs meanwhile.
    started = time.thread_time()
    registry = read_registry(tmp_path, cache=cache)
    cold = time.thread_time() - started
    started = time.thread_time()
    read_registry(tmp_path, cache=cache)
    warm = time.thread_time() - started
    assert len(registry.workloads) == 200
    assert cold < 1.0, f"cold read took {cold:.3f} s"
    assert warm < 0.1, f"cached read took {warm:.3f} s"
