"""Specs that cannot hang anything: YAML within a node, depth and text budget, a size limit per
file, and handlers that could never run a record refused when the spec is validated.

The bomb below is what hung ``lanehouse validate`` for over 200 s and 3.6 GB (issue 27): each
test holding one has its own timeout, so a regression fails the test instead of the suite.
"""

from __future__ import annotations

import logging
import time
from collections.abc import AsyncIterator, Iterator
from pathlib import Path

import pytest
from dagster import instance_for_test
from typer.testing import CliRunner

from consumers import SpecError, load_spec
from consumers.config.loading import MAX_SPEC_BYTES, MAX_SUBSTITUTED
from orchestration.cli import app
from orchestration.workloads.finding import find_workload
from orchestration.workloads.registry import read_registry
from tests.support.discovery_world import World
from tests.support.sensor_platform import Platform

pytestmark = pytest.mark.unit

HEAD = """\
name: {name}
source: {{kind: kafka, bootstrap_servers: "k:9092", topics: [{name}-in]}}
handler: {handler}
"""


def spec(name: str = "orders", handler: str = "consumers.dev.examples:enrich") -> str:
    return HEAD.format(name=name, handler=handler)


def bomb(leaf: str = '"lol"') -> str:
    """9 levels of 9 aliases: 9**9 (387 million) leaves in about 550 bytes."""
    levels = [f"a0: &a0 [{leaf}]"]
    levels += [f"a{k}: &a{k} [{', '.join([f'*a{k - 1}'] * 9)}]" for k in range(1, 10)]
    return "\n".join(levels) + "\n"


def merge_bomb() -> str:
    """The same with merge keys, which the YAML constructor itself expands."""
    levels = ["m0: &m0 {x: 1}"]
    levels += [f"m{k}: &m{k} {{<<: [{', '.join([f'*m{k - 1}'] * 9)}]}}" for k in range(1, 10)]
    return "\n".join(levels) + "\n"


def refused(path: Path, env: dict[str, str] | None = None) -> tuple[SpecError, float]:
    """The error, and the CPU seconds this thread spent on the load: the work done, whatever
    else the machine runs meanwhile (parallel test workers)."""
    started = time.thread_time()
    with pytest.raises(SpecError) as info:
        load_spec(path, env=env or {}, import_handler=False)
    assert info.value.file == str(path)
    return info.value, time.thread_time() - started


@pytest.mark.timeout(10)
@pytest.mark.parametrize(
    "body",
    [bomb(), bomb('"${LOL}"'), merge_bomb()],
    ids=["aliases", "aliases-interpolated", "merge-keys"],
)
def test_an_alias_bomb_is_refused_within_a_second(tmp_path: Path, body: str) -> None:
    assert len(bomb().encode()) < 600
    path = tmp_path / "bomb.yaml"
    path.write_text(spec() + body)
    error, seconds = refused(path, env={"LOL": "lol"})
    assert "more than 10,000 nodes with every alias ('*name') expanded" in error.reason
    assert str(path) in str(error)
    assert seconds < 1.0


@pytest.mark.timeout(10)
def test_aliases_within_the_budget_still_load_and_a_self_reference_or_deep_nesting_is_refused(
    tmp_path: Path,
) -> None:
    shared = tmp_path / "shared.yaml"
    shared.write_text(spec() + "checks: {lag: &n 50}\nmax_buffered: *n\ntags: {a: &v x, b: *v}\n")
    loaded = load_spec(shared, env={}, import_handler=False)
    assert (loaded.max_buffered, loaded.tags) == (50, {"a": "x", "b": "x"})

    loop = tmp_path / "loop.yaml"
    loop.write_text(spec() + "tags: &t {x: *t}\n")
    assert "used inside the node it names" in refused(loop)[0].reason
    # A whole file of '[': PyYAML's C composer recurses, so this would overflow the C stack
    # (a crash, not an error) if anything composed it before the flat walk over its events.
    deep = tmp_path / "deep.yaml"
    head = spec() + "tags: "
    deep.write_text(head + "[" * (MAX_SPEC_BYTES - len(head)))
    error, seconds = refused(deep)
    assert "nested deeper than 64 levels" in error.reason
    # CPU seconds: refused at the 65th '[', not after parsing 262,000 of them.
    assert seconds < 0.5
    # Deep through aliases: each level is shallow, the expansion is not.
    chained = tmp_path / "chained.yaml"
    levels = ["c0: &c0 [[[[[[[[x]]]]]]]]"]
    levels += [f"c{k}: &c{k} [[[[[[[[*c{k - 1}]]]]]]]]" for k in range(1, 10)]
    chained.write_text(spec() + "\n".join(levels) + "\n")
    assert "nested deeper than 64 levels" in refused(chained)[0].reason


def test_an_oversize_file_is_refused_unread_naming_the_file_and_the_limit(tmp_path: Path) -> None:
    path = tmp_path / "big.yaml"
    filler = "# " + "é" * 1000 + "\n"  # the limit falls inside a two-byte character
    path.write_text(spec() + filler * (MAX_SPEC_BYTES // len(filler) + 1))
    error, _ = refused(path)
    assert error.reason.startswith(f"file is larger than the limit of {MAX_SPEC_BYTES:,} bytes")
    assert str(path) in str(error)


def test_interpolation_substitutes_a_bounded_amount(tmp_path: Path) -> None:
    path = tmp_path / "many-refs.yaml"
    path.write_text(spec() + "owners: [" + ", ".join(['"${BIG}"'] * 20) + "]\n")
    error, _ = refused(path, env={"BIG": "x" * (MAX_SUBSTITUTED // 16)})
    assert error.field.startswith("owners[")
    assert f"substitute more than {MAX_SUBSTITUTED:,} characters" in error.reason


@pytest.mark.timeout(20)
def test_one_bomb_among_good_specs_is_reported_and_the_others_discovered(tmp_path: Path) -> None:
    (tmp_path / "orders.yaml").write_text(spec("orders"))
    (tmp_path / "bomb.yaml").write_text(spec("bomb") + bomb('"${LOL}"'))
    (tmp_path / "clicks.yaml").write_text(spec("clicks"))

    registry = read_registry(tmp_path, env={"LOL": "lol"})
    assert list(registry.workloads) == ["clicks", "orders"]
    (invalid,) = registry.invalid
    assert (invalid.file, invalid.field) == (str(tmp_path / "bomb.yaml"), "")
    assert "more than 10,000 nodes" in invalid.reason
    decision = World().tick(registry)
    assert sorted(launch.workload for launch in decision.launches) == ["clicks", "orders"]
    assert any(
        m.level == "error" and f"invalid spec {tmp_path / 'bomb.yaml'}: YAML over budget" in m.text
        for m in decision.messages
    )
    # A consumer, replay or rewind run finds its own spec beside the bomb.
    assert find_workload(tmp_path, "clicks")[1].name == "clicks"


@pytest.mark.timeout(60)
def test_the_discovery_sensor_logs_the_bomb_and_launches_the_others(tmp_path: Path) -> None:
    directory = tmp_path / "workloads"
    directory.mkdir()
    (directory / "orders.yaml").write_text(spec("orders"))
    (directory / "bomb.yaml").write_text(spec("bomb") + bomb())
    (tmp_path / "home").mkdir()
    with instance_for_test(temp_dir=str(tmp_path / "home")) as instance:
        platform = Platform(instance, directory)
        data = platform.tick()
    assert [r.partition_key for r in data.run_requests or []] == ["orders"]
    errors = platform.log_text(logging.ERROR)
    assert f"invalid spec {directory / 'bomb.yaml'}: YAML over budget" in errors
    assert platform.evaluated_in < 5.0


def yields_records(record: object) -> Iterator[object]:
    yield record


async def yields_async(record: object) -> AsyncIterator[object]:
    yield record


def two_arguments(record: object, extra: object) -> None:
    del record, extra


def keyword_only(*, record: object) -> None:
    del record


class Handler:
    """Instances are handlers; the class itself is not (it takes no record)."""

    def __call__(self, record: object, retries: int = 0) -> None:
        del record, retries


class YieldingHandler:
    def __call__(self, record: object) -> Iterator[object]:
        yield record


instance_handler = Handler()
yielding_instance = YieldingHandler()

UNFIT = {
    "yields_records": "is a generator function",
    "yields_async": "is an async generator function",
    "two_arguments": "missing a required argument: 'extra'",
    "keyword_only": "its signature is (*, record: 'object') -> 'None'",
    "Handler": "cannot be called with one positional argument",
    "yielding_instance": "is a generator function",
}


@pytest.mark.parametrize("target", sorted(UNFIT))
def test_a_handler_that_cannot_take_one_record_is_refused(tmp_path: Path, target: str) -> None:
    path = tmp_path / "spec.yaml"
    path.write_text(spec(handler=f"{__name__}:{target}"))
    with pytest.raises(SpecError) as info:
        load_spec(path, env={})
    assert (info.value.file, info.value.field) == (str(path), "handler")
    assert info.value.reason.startswith(f"'{__name__}:{target}' ")
    assert UNFIT[target] in info.value.reason


def test_fit_handlers_pass_and_a_builtin_taking_nothing_is_refused(tmp_path: Path) -> None:
    # builtins:print has no signature to read: it cannot be checked, so it passes.
    for target in (f"{__name__}:instance_handler", "builtins:print", "builtins:repr"):
        path = tmp_path / "ok.yaml"
        path.write_text(spec(handler=target))
        assert load_spec(path, env={}).handler == target
    path = tmp_path / "getcwd.yaml"
    path.write_text(spec(handler="os:getcwd"))
    with pytest.raises(SpecError, match=r"'os:getcwd' cannot be called with one positional"):
        load_spec(path, env={})


@pytest.mark.timeout(20)
@pytest.mark.parametrize(
    ("body", "message"),
    [
        (spec(handler=f"{__name__}:yields_records"), "handler: 'tests.unit.test_spec_limits:"),
        (spec(handler="os:getcwd"), "handler: 'os:getcwd' cannot be called with one"),
        (spec() + bomb(), "YAML over budget"),
    ],
    ids=["generator", "no-argument", "bomb"],
)
def test_validate_refuses_them_naming_the_file(tmp_path: Path, body: str, message: str) -> None:
    path = tmp_path / "bad.yaml"
    path.write_text(body)
    result = CliRunner().invoke(app, ["validate", str(path)], env={"COLUMNS": "300"})
    assert result.exit_code == 2, result.output
    text = " ".join(result.output.split())
    assert str(path) in text and message in text, result.output
