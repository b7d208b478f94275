"""One topic landed twice into one dataset: the rule (consumers/config/overlaps.py), and the two
places that apply it, ``load_specs`` (``lanehouse validate``/``consume``) and the registry (the
discovery sensor)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import yaml

from consumers import SpecError, WorkloadSpec, load_specs
from consumers.config.overlaps import landing_overlaps
from consumers.config.spec import spec_hash
from orchestration.workloads.registry import read_registry

pytestmark = pytest.mark.unit

KAFKA = {"kind": "kafka", "bootstrap_servers": "broker-1:9092", "topics": ["clicks"]}
PULSAR = {"kind": "pulsar", "service_url": "pulsar://broker-1:6650", "topics": ["orders"]}


def data(name: str, source: dict[str, Any] | None = None, **overrides: Any) -> dict[str, Any]:
    """A landing workload reading ``clicks`` from Kafka into dataset ``clicks``."""
    source = source or {}
    base = KAFKA if source.get("kind", "kafka") == "kafka" else {}
    spec: dict[str, Any] = {
        "name": name,
        "source": {**base, **source},
        "landing": {"dataset": "clicks"},
    }
    spec.update(overrides)
    return spec


def spec(name: str, source: dict[str, Any] | None = None, **overrides: Any) -> WorkloadSpec:
    return WorkloadSpec.model_validate(data(name, source, **overrides))


def overlaps(*specs: WorkloadSpec) -> list[tuple[tuple[str, str], tuple[str, ...]]]:
    """(files, topics) of each overlap, a spec's file named after it."""
    found = landing_overlaps((f"{s.name}.yaml", s) for s in specs)
    return [(overlap.files, overlap.topics) for overlap in found]


def pulsar(name: str, allow: bool | None = None, **source: Any) -> WorkloadSpec:
    landing: dict[str, Any] = {"dataset": "orders"}
    if allow is not None:
        landing["allow_overlap"] = allow
    return spec(name, {**PULSAR, **source}, landing=landing)


# --- the rule ---------------------------------------------------------------------------------


def test_a_copy_landing_the_same_topic_into_the_same_dataset_is_an_overlap() -> None:
    assert overlaps(spec("clickstream"), spec("clickstream-copy")) == [
        (("clickstream.yaml", "clickstream-copy.yaml"), ("clicks",))
    ]


def test_one_shared_topic_among_several_is_enough() -> None:
    a = spec("a", {"topics": ["clicks", "views"]})
    b = spec("b", {"topics": ["carts", "views"]})
    assert overlaps(a, b) == [(("a.yaml", "b.yaml"), ("views",))]


@pytest.mark.parametrize(
    ("second", "why"),
    [
        (spec("b", landing={"dataset": "clicks_v2"}), "another dataset"),
        (spec("b", {"topics": ["views"]}), "another topic"),
        (spec("b", {"bootstrap_servers": "other-broker:9092"}), "another cluster"),
        (spec("b", enabled=False), "a disabled workload"),
        (spec("b", landing=None, handler="tests.handlers:noop"), "a workload that lands nothing"),
        (spec("b", {**PULSAR, "topics": ["clicks"]}), "another broker kind"),
    ],
    ids=lambda value: value if isinstance(value, str) else "",
)
def test_no_overlap(second: WorkloadSpec, why: str) -> None:
    assert overlaps(spec("a"), second) == [], why


@pytest.mark.parametrize(
    "servers",
    [
        "broker-1:9092",
        "BROKER-1:9092",
        "broker-1",
        "broker-0:9092, broker-1:9092",
        "kafka://broker-1",
    ],
)
def test_one_cluster_however_its_servers_are_listed(servers: str) -> None:
    second = spec("b", {"bootstrap_servers": servers})
    assert overlaps(spec("a"), second) == [(("a.yaml", "b.yaml"), ("clicks",))]


def test_pulsar_a_partitioned_topic_and_one_of_its_partitions_overlap() -> None:
    whole = pulsar("whole")
    part = pulsar("part", topics=["persistent://public/default/orders-partition-1"])
    other = pulsar("other", topics=["persistent://public/default/orders-partition-2"])
    assert [files for files, _ in overlaps(whole, part, other)] == [
        ("whole.yaml", "part.yaml"),
        ("whole.yaml", "other.yaml"),
    ]  # two partitions of one topic are two topics
    assert overlaps(pulsar("a"), pulsar("b", service_url="pulsar://broker-1")) != []
    assert overlaps(pulsar("a"), pulsar("b", service_url="pulsar+ssl://broker-1:6651")) == []


def test_both_opting_in_lands_twice_on_purpose_but_one_alone_does_not() -> None:
    assert overlaps(pulsar("a", allow=True), pulsar("b", allow=True)) == []
    (overlap,) = landing_overlaps([("a.yaml", pulsar("a", allow=True)), ("b.yaml", pulsar("b"))])
    assert overlap.opted_in == (True, False)
    assert "landing.allow_overlap is true only in a.yaml: set it in both" in overlap.reason(
        "b.yaml"
    )


def test_the_reason_names_both_files_the_topic_the_dataset_and_the_way_out() -> None:
    (overlap,) = landing_overlaps([("w/a.yaml", spec("a")), ("w/b.yaml", spec("b"))])
    reason = overlap.reason("w/b.yaml")
    assert reason.startswith(
        "workload 'b' and workload 'a' (w/a.yaml) both land topic 'clicks' of kafka "
        "broker-1:9092 into dataset 'clicks': every record would land twice"
    )
    assert "into two datasets" in reason
    assert "until then neither is started" in reason
    assert "(w/b.yaml)" in overlap.reason("w/a.yaml")
    assert str(overlap) == "w/a.yaml and w/b.yaml both land topic 'clicks' into dataset 'clicks'"


def test_kafka_cannot_opt_in_its_files_would_collide() -> None:
    with pytest.raises(ValueError, match=r"landing\.allow_overlap: only a Pulsar source"):
        spec("a", landing={"dataset": "clicks", "allow_overlap": True})
    assert spec("a", landing={"dataset": "clicks", "allow_overlap": False}).landing is not None
    with pytest.raises(ValueError, match="allow_overlap"):
        pulsar("a", allow="perhaps")  # type: ignore[arg-type]


def test_the_opt_in_is_outside_the_spec_hash() -> None:
    """Opting in (to let a second workload start) must not restart the running one."""
    assert spec_hash(pulsar("a")) == spec_hash(pulsar("a", allow=False))
    assert spec_hash(pulsar("a")) == spec_hash(pulsar("a", allow=True))
    assert spec_hash(pulsar("a")) != spec_hash(pulsar("a", topics=["orders-2"]))


# --- load_specs: `lanehouse validate` and `consume` ---------------------------------------------


def write(directory: Path, file: str, spec_data: dict[str, Any]) -> Path:
    path = directory / file
    path.write_text(yaml.safe_dump(spec_data, sort_keys=False))
    return path


def test_load_specs_refuses_an_overlap_naming_both_files(tmp_path: Path) -> None:
    first = write(tmp_path, "clickstream.yaml", data("clickstream", handler="tests.handlers:noop"))
    copy = write(tmp_path, "copy.yaml", data("clickstream-copy", handler="tests.handlers:noop"))
    with pytest.raises(SpecError) as info:
        load_specs([tmp_path], env={})
    assert (info.value.file, info.value.field) == (str(copy), "landing")
    assert str(first) in str(info.value)
    write(tmp_path, "copy.yaml", data("clickstream-copy", enabled=False))
    assert [s.name for s in load_specs([tmp_path], env={})] == ["clickstream", "clickstream-copy"]


# --- the registry: the discovery sensor -------------------------------------------------------


def test_the_registry_keeps_both_files_apart_and_the_others_registered(tmp_path: Path) -> None:
    write(tmp_path, "a.yaml", data("a"))
    write(tmp_path, "b.yaml", data("b"))
    write(tmp_path, "views.yaml", data("views", {"topics": ["views"]}))
    registry = read_registry(tmp_path, env={})
    assert list(registry.workloads) == ["views"]
    a, b = (str(tmp_path / "a.yaml"), str(tmp_path / "b.yaml"))
    assert [(i.file, i.field, i.name) for i in registry.invalid] == [
        (a, "landing", "a"),
        (b, "landing", "b"),
    ]
    assert b in registry.invalid[0].reason and a in registry.invalid[1].reason
    assert [overlap.files for overlap in registry.overlaps] == [(a, b)]


def test_a_file_whose_name_is_declared_twice_still_blocks_an_overlap(tmp_path: Path) -> None:
    """``a`` may still run on its last valid spec (held): a new file must not land its topic."""
    write(tmp_path, "a.yaml", data("a"))
    write(tmp_path, "a-again.yaml", data("a", {"topics": ["other"]}))
    write(tmp_path, "b.yaml", data("b"))
    registry = read_registry(tmp_path, env={})
    assert registry.workloads == {}
    fields = {Path(i.file).name: i.field for i in registry.invalid}
    assert fields == {"a-again.yaml": "name", "a.yaml": "name", "b.yaml": "landing"}
