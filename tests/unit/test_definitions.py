"""The Dagster code location loads: topics as source assets, the consumer job, the sensor."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from consumers.spec import WorkloadSpec

pytestmark = pytest.mark.unit


def spec(name: str, source: dict[str, Any]) -> WorkloadSpec:
    return WorkloadSpec.model_validate(
        {"name": name, "source": source, "handler": "consumers.examples:enrich"}
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


def test_kafka_and_pulsar_topics_of_one_name_are_distinct_assets() -> None:
    from dagster import AssetKey, Definitions

    from orchestration.definitions import topic_assets

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
    from orchestration.definitions import topic_assets

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
    good = {"name": "good", "source": kafka("good.events"), "handler": "consumers.examples:enrich"}
    (tmp_path / "good.yaml").write_text(yaml.safe_dump(good))
    defs = build_definitions(tmp_path)
    Definitions.validate_loadable(defs)
    assert [s.key for s in defs.resolve_all_asset_specs()] == [AssetKey(["topics", "good_events"])]
    assert defs.resolve_job_def("consume_workload").partitions_def is not None
    assert defs.resolve_sensor_def("workload_discovery").job_name == "consume_workload"
