"""The Dagster code location loads: topics as source assets, the consumer job, the sensor."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from consumers import WorkloadSpec

pytestmark = pytest.mark.unit


def spec(name: str, source: dict[str, Any], **extra: Any) -> WorkloadSpec:
    return WorkloadSpec.model_validate(
        {"name": name, "source": source, "handler": "consumers.dev.examples:enrich", **extra}
    )


def kafka(*topics: str) -> dict[str, Any]:
    return {"kind": "kafka", "bootstrap_servers": "127.0.0.1:9092", "topics": list(topics)}


def pulsar(*topics: str) -> dict[str, Any]:
    return {"kind": "pulsar", "service_url": "pulsar://127.0.0.1:6650", "topics": list(topics)}


def test_definitions_load_with_topic_assets() -> None:
    from dagster import AssetKey, Definitions

    from orchestration.definitions import defs

    Definitions.validate_loadable(defs)
    kinds = {spec.key: spec.kinds for spec in defs.resolve_all_asset_specs()}
    assert kinds[AssetKey(["topics", "clickstream_events"])] == {"kafka"}
    assert kinds[AssetKey(["topics", "pulsar", "public", "default", "orders"])] == {"pulsar"}
    # The jobs a person launches from the launchpad, one workload partition each.
    for name in ("consume_workload", "replay_dead_letters", "rewind_workload"):
        assert defs.resolve_job_def(name).partitions_def is not None


def test_kafka_and_pulsar_topics_of_one_name_are_distinct_assets() -> None:
    from dagster import AssetKey, Definitions

    from orchestration.platform.catalog import topic_assets

    assets = topic_assets(
        [
            spec("clicks", kafka("orders", "pulsar")),
            spec("orders", pulsar("orders")),
            # The same topic by its full name: one asset, read by both.
            spec("audit", pulsar("persistent://public/default/orders", "persistent://t1/ns.x/a-b")),
        ]
    )
    by_key = {asset.key: asset for asset in assets}
    assert set(by_key) == {
        AssetKey(["topics", "orders"]),
        AssetKey(["topics", "pulsar"]),
        AssetKey(["topics", "pulsar", "public", "default", "orders"]),
        AssetKey(["topics", "pulsar", "t1", "ns_x", "a_b"]),
    }
    orders = by_key[AssetKey(["topics", "pulsar", "public", "default", "orders"])]
    assert orders.kinds == {"pulsar"}
    assert orders.metadata == {
        "topic": "persistent://public/default/orders",
        "workloads": "audit, orders",
    }
    assert "Pulsar topic 'persistent://public/default/orders'" in (orders.description or "")
    assert by_key[AssetKey(["topics", "orders"])].kinds == {"kafka"}
    Definitions.validate_loadable(Definitions(assets=assets))


def test_topics_that_would_share_a_key_are_refused_by_name() -> None:
    from orchestration.platform.catalog import topic_assets

    with pytest.raises(ValueError, match=r"'a\.b' and 'a_b' both map to the asset key topics/a_b"):
        topic_assets([spec("one", kafka("a.b")), spec("two", kafka("a_b"))])
    with pytest.raises(ValueError, match="Pulsar topics"):
        topic_assets([spec("one", pulsar("a-b")), spec("two", pulsar("a.b"))])


def test_a_bad_spec_leaves_the_other_workloads_loaded(tmp_path: Path) -> None:
    """The code location must load whatever one spec file says: the sensor reports the bad one."""
    import yaml
    from dagster import AssetKey, Definitions

    from orchestration.definitions import build_definitions

    (tmp_path / "bad.yaml").write_text("name: ../x\n")
    good = {
        "name": "good",
        "source": kafka("good.events"),
        "handler": "consumers.dev.examples:enrich",
    }
    (tmp_path / "good.yaml").write_text(yaml.safe_dump(good))
    defs = build_definitions(tmp_path)
    Definitions.validate_loadable(defs)
    topics = [s.key for s in defs.resolve_all_asset_specs() if s.group_name == "topics"]
    assert topics == [AssetKey(["topics", "good_events"])]
    assert defs.resolve_job_def("consume_workload").partitions_def is not None
    sensor = defs.resolve_sensor_def("workload_discovery")
    assert {job.name for job in sensor.jobs} == {"consume_workload", "consume_host"}
    assert defs.resolve_job_def("consume_host").partitions_def is not None


SPARK_ASSETS = (
    "clean_clicks",
    "click_quarantine",
    "click_duplicates",
    "clean_orders",
    "order_quarantine",
    "order_duplicates",
    "sessions",
    "daily_funnel",
    "daily_revenue",
)


def test_the_lake_graph_runs_from_topics_through_landed_to_spark_assets() -> None:
    from dagster import AssetKey

    from orchestration.definitions import defs

    graph = defs.resolve_asset_graph()

    def parents(name: str) -> set[str]:
        return {k.to_user_string() for k in graph.get(AssetKey(name)).parent_keys}

    assert parents("landed_clickstream") == {"topics/clickstream_events"}
    assert parents("landed_orders") == {"topics/pulsar/public/default/orders"}
    assert parents("clean_clicks") == {"landed_clickstream"}
    assert parents("click_duplicates") == {"landed_clickstream"}
    assert parents("clean_orders") == {"landed_orders"}
    assert parents("sessions") == {"clean_clicks"}
    assert parents("daily_funnel") == {"clean_clicks"}
    assert parents("daily_revenue") == {"clean_orders", "sessions"}
    job = defs.resolve_job_def("spark_daily")
    assert {k.to_user_string() for k in job.asset_layer.executable_asset_keys} == set(SPARK_ASSETS)
    assert job.executor_def.name == "in_process"
    assert job.run_tags["lanehouse/spark"] == "daily"


def test_every_spark_asset_is_daily_single_run_with_a_column_schema() -> None:
    from datetime import timedelta

    from dagster import AssetKey, DailyPartitionsDefinition, TableSchema
    from dagster._core.definitions.backfill_policy import BackfillPolicyType
    from dagster._core.definitions.freshness import TimeWindowFreshnessPolicy

    from orchestration.definitions import defs
    from orchestration.lake.runs import SPARK_POOL, SPARK_RUN_LIMIT
    from orchestration.local.instance import instance_config

    graph = defs.resolve_asset_graph()
    for name in SPARK_ASSETS:
        node = graph.get(AssetKey(name))
        assert isinstance(node.partitions_def, DailyPartitionsDefinition), name
        assert node.partitions_def.timezone == "UTC" and node.partitions_def.end_offset == 1
        assert node.backfill_policy is not None, name
        assert node.backfill_policy.policy_type == BackfillPolicyType.SINGLE_RUN, name
        assert isinstance(node.metadata["dagster/column_schema"], TableSchema), name
        assert node.group_name == "spark" and node.kinds == {"spark", "parquet"}, name
        assert node.pools == {SPARK_POOL}, name  # limits Spark runs however they are launched
    assert instance_config()["concurrency"]["pools"] == {
        "granularity": "run",
        "default_limit": SPARK_RUN_LIMIT,
    }
    checks = {(k.asset_key.to_user_string(), k.name) for k in graph.asset_check_keys}
    assert {("clean_clicks", "reconciles"), ("clean_orders", "reconciles")} <= checks
    assert not {a for a, _ in checks if a.startswith("landed_")}  # freshness is a policy:
    for name in ("landed_clickstream", "landed_orders"):
        policy = graph.get(AssetKey(name)).freshness_policy
        assert isinstance(policy, TimeWindowFreshnessPolicy), name
        assert policy.fail_window.to_timedelta() == timedelta(minutes=60), name
    assert "landed_freshness" not in {s.name for s in defs.sensors or []}  # no sensor needed
    assert defs.resolve_sensor_def("landed_day_closed").job_name == "spark_daily"
    assert defs.resolve_schedule_def("spark_nightly").job_name == "spark_daily"


def test_landed_assets_follow_the_specs_landing_datasets() -> None:
    from dagster import AssetKey

    from orchestration.platform.catalog import landed_assets

    clicks = spec("clicks", kafka("clickstream.events"), landing={"dataset": "clickstream"})
    audit = spec("audit", pulsar("audit"), landing={"dataset": "audit_log"})
    specs = [clicks, audit, spec("plain", kafka("x"))]
    by_key = {a.key: a for a in landed_assets(specs, datasets=["orders"])}
    assert set(by_key) == {
        AssetKey("landed_audit_log"),
        AssetKey("landed_clickstream"),
        AssetKey("landed_orders"),  # a pipeline reads it, even with no spec landing there
    }
    deps = {d.asset_key for d in by_key[AssetKey("landed_clickstream")].deps}
    assert deps == {AssetKey(["topics", "clickstream_events"])}
    landed_audit = by_key[AssetKey("landed_audit_log")]
    assert {d.asset_key for d in landed_audit.deps} == {
        AssetKey(["topics", "pulsar", "public", "default", "audit"])
    }
    assert landed_audit.partitions_def is not None and landed_audit.group_name == "landed"
    assert list(by_key[AssetKey("landed_orders")].deps) == []


def test_a_dataset_no_workload_lands_any_more_stays_defined_while_the_lake_holds_it(
    tmp_path: Path,
) -> None:
    """Before: removing the workload left ``landed_<dataset>`` in the catalog without a
    definition. Retired now: defined, said so, and no freshness policy that can only go red."""
    from dagster import AssetKey

    from orchestration.platform.catalog import landed_assets

    for name in ("added", "clickstream", "Not-A-Dataset"):
        (tmp_path / "landed" / name / "event_date=2026-11-26").mkdir(parents=True)
    clicks = spec("clicks", kafka("clickstream.events"), landing={"dataset": "clickstream"})
    landed = landed_assets([clicks], tmp_path)
    by_key = {a.key: a for a in landed}
    assert set(by_key) == {AssetKey("landed_added"), AssetKey("landed_clickstream")}
    added = by_key[AssetKey("landed_added")]
    assert added.metadata["retired"] is True and "retired" in (added.description or "")
    assert by_key[AssetKey("landed_clickstream")].metadata["retired"] is False
    assert added.freshness_policy is None  # nobody lands it: it can only go stale
    assert by_key[AssetKey("landed_clickstream")].freshness_policy is not None
    assert {a.key for a in landed_assets([clicks], tmp_path / "no-lake")} == {
        AssetKey("landed_clickstream")
    }


def test_the_lake_start_comes_from_the_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    from orchestration.lake.landed import lake_partitions

    monkeypatch.setenv("LANEHOUSE_LAKE_START", "2025-06-01")
    assert lake_partitions().get_first_partition_key() == "2025-06-01"
    monkeypatch.setenv("LANEHOUSE_LAKE_START", "June 1st")
    with pytest.raises(ValueError, match="LANEHOUSE_LAKE_START must be a date like 2026-01-01"):
        lake_partitions()


def test_the_observation_interval_comes_from_the_run_config_then_the_environment(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    from dagster import Failure

    from orchestration.workloads.job import ConsumerRunConfig

    monkeypatch.delenv("LANEHOUSE_OBSERVE_SECONDS", raising=False)
    assert ConsumerRunConfig().observe_every() == 30.0
    monkeypatch.setenv("LANEHOUSE_OBSERVE_SECONDS", "5")
    assert ConsumerRunConfig().observe_every() == 5.0
    assert ConsumerRunConfig(observe_every_seconds=0.5).observe_every() == 0.5
    for bad in ("0", "-1", "soon", "inf"):
        monkeypatch.setenv("LANEHOUSE_OBSERVE_SECONDS", bad)
        with pytest.raises(Failure, match="LANEHOUSE_OBSERVE_SECONDS"):
            ConsumerRunConfig().observe_every()
