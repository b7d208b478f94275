"""The public orchestration API: ``lanehouse_definitions()`` and ``LanehouseComponent`` give the
platform without the shop, with the places they are given; bad fields fail the load, naming
what is wrong. (The whole path from a built wheel in a new project: tests/e2e/
test_new_project.py.)"""

from __future__ import annotations

import re
import traceback
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import pytest
import yaml

pytestmark = pytest.mark.unit

SPEC = {
    "name": "audit",
    "source": {"kind": "kafka", "bootstrap_servers": "127.0.0.1:9092", "topics": ["audit.events"]},
    "landing": {"dataset": "audit_log"},
}


def test_the_public_names_are_exactly_these() -> None:
    """A pinned list: adding or dropping a public name is a decision, not an accident."""
    import orchestration.platform as api

    assert sorted(api.__all__) == [
        "LAKE_PARTITIONS",
        "LakeSparkResource",
        "LandedDays",
        "LanehouseComponent",
        "PlatformSettings",
        "SPARK_POOL",
        "SPARK_RUN_TAG",
        "lake_partitions",
        "landed_key",
        "lanehouse_definitions",
        "platform_settings",
        "read_days",
        "read_landed_days",
        "row_counts",
        "run_days",
        "spark_resource",
        "table_root",
        "table_schema",
        "total_rows",
        "write_days",
    ]
    assert all(hasattr(api, name) for name in api.__all__)


def workloads(tmp_path: Path) -> Path:
    directory = tmp_path / "workloads"
    directory.mkdir()
    (directory / "audit.yaml").write_text(yaml.safe_dump(SPEC))
    return directory


def test_the_platform_alone_for_a_directory_of_specs(tmp_path: Path) -> None:
    from dagster import AssetKey

    from orchestration.platform import lanehouse_definitions, platform_settings
    from orchestration.workloads.names import workloads_dir

    defs = lanehouse_definitions(
        workloads(tmp_path),
        lake=tmp_path / "lake",
        dagster_url="http://127.0.0.1:3999/",
        datasets=["reports"],
    )
    graph = defs.resolve_asset_graph()
    assert {key.to_user_string() for key in graph.get_all_asset_keys()} == {
        "topics/audit_events",
        "workloads/audit",
        "landed_audit_log",
        "landed_reports",
    }
    assert graph.get(AssetKey("landed_audit_log")).parent_keys == {
        AssetKey(["topics", "audit_events"])
    }
    jobs = {job.name for job in defs.resolve_all_job_defs()}
    assert {"consume_workload", "rewind_workload", "replay_dead_letters"} <= jobs
    assert "spark_daily" not in jobs  # no shop
    assert [s.name for s in defs.sensors or []] == ["workload_discovery"]
    places = platform_settings()
    assert places.workloads == (tmp_path / "workloads").resolve() == workloads_dir()
    assert places.lake == (tmp_path / "lake").resolve()
    assert places.dagster_url == "http://127.0.0.1:3999"


def test_places_not_given_come_from_the_environment(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from orchestration.platform import lanehouse_definitions, platform_settings

    monkeypatch.setenv("LANEHOUSE_LAKE", str(tmp_path / "env-lake"))
    monkeypatch.delenv("LANEHOUSE_DAGSTER_URL", raising=False)
    lanehouse_definitions(workloads(tmp_path))
    assert platform_settings().lake == (tmp_path / "env-lake").resolve()
    assert platform_settings().dagster_url is None


@pytest.mark.parametrize(
    ("budget", "launched"),
    [
        (None, [("consume_host", "host.0")]),  # LANEHOUSE_HOST_WORKLOADS, else 50
        (1, [("consume_host", "host.0"), ("consume_host", "host.1")]),
        (0, [("consume_workload", "audit"), ("consume_workload", "ledger")]),
    ],
)
def test_host_workloads_sets_how_many_workloads_share_a_host_run(
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    budget: int | None,
    launched: list[tuple[str, str]],
) -> None:
    from orchestration.platform import lanehouse_definitions

    # A malformed variable: a budget given must win without reading it.
    monkeypatch.setenv("LANEHOUSE_HOST_WORKLOADS", "two")
    if budget is None:
        monkeypatch.delenv("LANEHOUSE_HOST_WORKLOADS")

    directory = workloads(tmp_path)
    ledger = {**SPEC, "name": "ledger", "landing": {"dataset": "ledger"}}
    (directory / "ledger.yaml").write_text(yaml.safe_dump(ledger))
    defs = lanehouse_definitions(directory, lake=tmp_path / "lake", host_workloads=budget)
    assert first_launches(defs) == launched


def first_launches(defs: Any) -> list[tuple[str, str | None]]:
    """The runs the discovery sensor's first tick launches: (job, partition)."""
    from dagster import instance_for_test

    from tests.support.sensor_platform import daemon_context

    sensor = defs.get_sensor_def("workload_discovery")
    with instance_for_test() as instance:
        tick = sensor.evaluate_tick(daemon_context(instance, None, defs))
    return sorted((r.job_name, r.partition_key) for r in tick.run_requests or [])


@pytest.mark.parametrize(
    ("given", "said"),
    [
        ({"workloads": "missing"}, "does not exist"),
        ({"host_workloads": -1}, "host_workloads=-1"),
        ({"dagster_url": "127.0.0.1:3000"}, "expected an http(s) address"),
        ({"datasets": ["Bad-Name"]}, "'Bad-Name' is not allowed"),
    ],
)
def test_a_bad_place_fails_naming_it(tmp_path: Path, given: dict[str, object], said: str) -> None:
    from orchestration.platform import lanehouse_definitions

    workloads(tmp_path)
    # Relative places are read from the test's tmp_path: "missing" is not there.
    arguments: dict[str, object] = {"workloads": tmp_path / "workloads", **given}
    arguments["workloads"] = tmp_path / str(arguments["workloads"])
    with pytest.raises(ValueError, match=re.escape(said)):
        lanehouse_definitions(**arguments)  # type: ignore[arg-type]


@contextmanager
def declared(attributes: Mapping[str, object]) -> Iterator[tuple[Path, Any]]:
    """A project whose ``defs.yaml`` declares the component with ``attributes``, and a
    ``workloads/`` of one spec: its root, and what loads the component and its definitions."""
    from dagster.components.testing import create_defs_folder_sandbox

    from orchestration.platform import LanehouseComponent

    with create_defs_folder_sandbox() as sandbox:
        workloads(sandbox.project_root)
        path = sandbox.scaffold_component(
            component_cls=LanehouseComponent,
            defs_yaml_contents={
                "type": "orchestration.platform.LanehouseComponent",
                "attributes": attributes,
            },
        )
        yield sandbox.project_root, lambda: sandbox.load_component_and_build_defs(defs_path=path)


def test_the_component_from_a_defs_yaml() -> None:
    from dagster import AssetKey

    from orchestration.platform import LanehouseComponent, platform_settings

    attributes = {
        "workloads": "workloads",
        "lake": "lake",
        "dagster_url": "http://127.0.0.1:3999",
        "datasets": ["reports"],
        "host_workloads": 0,
    }
    with declared(attributes) as (root, load), load() as (component, defs):
        assert isinstance(component, LanehouseComponent)
        assert first_launches(defs) == [("consume_workload", "audit")]  # 0: a run each
        keys = defs.resolve_asset_graph().get_all_asset_keys()
        assert AssetKey(["workloads", "audit"]) in keys and AssetKey("landed_reports") in keys
        assert platform_settings().lake == (root / "lake").resolve()


@pytest.mark.parametrize(
    ("attributes", "said"),
    [
        ({"workloads": "nowhere"}, "is not a directory"),
        ({"workloads": "workloads", "dagster_url": "ftp://x"}, "expected an http(s) address"),
        ({"workloads": "workloads", "datasets": ["a b"]}, "is not allowed"),
        ({"workloads": "workloads", "lakes": "typo"}, "lakes"),
        ({"workloads": "workloads", "host_workloads": -1}, "host_workloads"),
    ],
)
def test_a_bad_field_fails_the_load_naming_it(attributes: dict[str, object], said: str) -> None:
    with declared(attributes) as (_, load), pytest.raises(Exception) as failure, load():
        pass
    # Dagster wraps it in the component tree's error; the cause says what is wrong.
    assert said in "".join(traceback.format_exception(failure.value))
