"""Named clusters: declared once in lanehouse.yaml, resolved when a spec loads, secrets masked,
hashed into the spec hash, and each output and dead letter produced on its own cluster."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
import yaml
from typer.testing import CliRunner

from consumers import (
    DeliveryError,
    KafkaCluster,
    KafkaSourceSpec,
    PlatformConfig,
    SpecError,
    WorkloadSpec,
    load_spec,
    load_specs,
)
from consumers.backends.base import delivery_failure
from consumers.backends.routing import RoutedProducer, routed_producer_factory
from consumers.config.platform import load_platform_config
from consumers.config.spec import spec_hash
from consumers.service.launch import sink_producer_factory
from orchestration.cli import app
from orchestration.workloads.registry import SpecCache, read_registry

pytestmark = pytest.mark.unit

SECRET = "hunter2"
ENV = {"KAFKA_PASSWORD": SECRET}


def platform_data(password: str = "${KAFKA_PASSWORD}", **extra: Any) -> dict[str, Any]:
    return {
        "clusters": {
            "prod-eu": {
                "kind": "kafka",
                "bootstrap_servers": "eu-1:9093,eu-2:9093",
                "config": {
                    "security.protocol": "SASL_SSL",
                    "sasl.mechanism": "PLAIN",
                    "sasl.username": "lanehouse",
                    "sasl.password": password,
                    "client.id": "from-cluster",
                },
                "producer": {"linger.ms": 20, "compression.type": "lz4"},
            },
            "backup-eu": {"kind": "kafka", "bootstrap_servers": "backup:9092"},
            "pulsar-eu": {"kind": "pulsar", "service_url": "pulsar://pulsar-eu:6650"},
            **extra,
        }
    }


def write(path: Path, data: dict[str, Any]) -> Path:
    path.write_text(yaml.safe_dump(data, sort_keys=False))
    return path


def spec_data(**overrides: Any) -> dict[str, Any]:
    return {
        "name": "clicks",
        "source": {"cluster": "prod-eu", "topics": ["clicks"]},
        "handler": "tests.handlers:noop",
        **overrides,
    }


@pytest.fixture
def config_file(tmp_path: Path) -> Path:
    return write(tmp_path / "lanehouse.yaml", platform_data())


def load(tmp_path: Path, config_file: Path, env: dict[str, str] | None = None, **spec: Any) -> Any:
    path = write(tmp_path / "spec.yaml", spec_data(**spec))
    env = {**ENV, "LANEHOUSE_CONFIG": str(config_file)} if env is None else env
    return load_spec(path, env=env)


def error(tmp_path: Path, config_file: Path, **spec: Any) -> SpecError:
    with pytest.raises(SpecError) as info:
        load(tmp_path, config_file, **spec)
    assert SECRET not in str(info.value)
    return info.value


# --------------------------------------------------------------------------- resolution


def test_a_source_gets_its_clusters_servers_and_properties_and_overrides_them(
    tmp_path: Path, config_file: Path
) -> None:
    source = {"cluster": "prod-eu", "topics": ["clicks"], "config": {"client.id": "mine"}}
    spec = load(tmp_path, config_file, source=source)
    assert spec.source.kind == "kafka" and spec.source.cluster == "prod-eu"
    assert spec.source.bootstrap_servers == "eu-1:9093,eu-2:9093"
    client = spec.client_config()
    assert client["sasl.password"] == SECRET  # revealed for the client only
    assert client["client.id"] == "mine"  # the spec's own keys win
    assert client["bootstrap.servers"] == "eu-1:9093,eu-2:9093"
    assert client["security.protocol"] == "SASL_SSL"


def test_an_explicit_platform_config_is_used_instead_of_the_file(tmp_path: Path) -> None:
    platform = PlatformConfig.model_validate(platform_data(password="given"))
    path = write(tmp_path / "spec.yaml", spec_data())
    (spec,) = load_specs(
        [path], env={"LANEHOUSE_CONFIG": str(tmp_path / "none.yaml")}, platform=platform
    )
    assert spec.client_config()["sasl.password"] == "given"


def test_inline_servers_keep_working_without_a_platform_config(tmp_path: Path) -> None:
    source = {"kind": "kafka", "bootstrap_servers": "127.0.0.1:9092", "topics": ["clicks"]}
    env = {"LANEHOUSE_CONFIG": str(tmp_path / "absent.yaml")}  # never read: no cluster named
    spec = load(tmp_path, tmp_path / "absent.yaml", env=env, source=source)
    assert spec.source.cluster is None and spec.clusters == {}


def test_outputs_and_dead_letters_produce_on_their_own_cluster_with_overrides(
    tmp_path: Path, config_file: Path
) -> None:
    spec = load(
        tmp_path,
        config_file,
        output={"topic": "clicks.out", "config": {"linger.ms": 50}},
        dead_letter={"topic": "clicks.dlq", "cluster": "backup-eu", "config": {"acks": "all"}},
    )
    output = spec.producer_target(spec.output)
    assert output.servers == "eu-1:9093,eu-2:9093"
    props = dict(output.properties)
    # the source's connection, then the cluster's producer defaults, then the sink's own config
    assert props["linger.ms"] == 50 and props["compression.type"] == "lz4"
    assert props["sasl.password"].get_secret_value() == SECRET
    dead = spec.producer_target(spec.dead_letter)
    assert (dead.servers, dict(dead.properties)) == ("backup:9092", {"acks": "all"})
    assert isinstance(spec.clusters["backup-eu"], KafkaCluster)


def test_the_engine_gets_one_producer_per_cluster_routed_by_topic(
    tmp_path: Path, config_file: Path
) -> None:
    same = load(tmp_path, config_file, output={"topic": "o"}, dead_letter={"topic": "d"})
    apart = load(
        tmp_path,
        config_file,
        output={"topic": "o"},
        dead_letter={"topic": "d", "cluster": "backup-eu"},
    )
    single, routed = sink_producer_factory(same), sink_producer_factory(apart)
    assert single is not None and routed is not None
    producers = [single(), routed()]
    try:
        assert not isinstance(producers[0], RoutedProducer)
        assert isinstance(producers[1], RoutedProducer)
    finally:
        for producer in producers:
            producer.close()
    assert sink_producer_factory(load(tmp_path, config_file)) is None


class StubProducer:
    def __init__(self) -> None:
        self.sent: list[str] = []
        self.polled: list[float] = []
        self.closed = False

    def produce(self, topic: str, value: Any = None, key: Any = None, **kw: Any) -> None:
        self.sent.append(topic)

    def poll(self, timeout: float = -1) -> int:
        self.polled.append(timeout)
        return 1

    def flush(self, timeout: float = -1) -> int:
        return len(self.sent)

    def close(self) -> None:
        self.closed = True

    def delivery_error(self, error: object) -> DeliveryError:
        return delivery_failure(error)


def test_a_routed_producer_sends_each_topic_through_its_producer() -> None:
    a, b = StubProducer(), StubProducer()
    made = iter([a, b])
    factory_a, factory_b = (lambda: next(made)), (lambda: next(made))
    producer = routed_producer_factory({"out": factory_a, "dlq": factory_b, "x": factory_a})()
    for topic in ("out", "dlq", "x", "out"):
        producer.produce(topic, b"v")
    assert (a.sent, b.sent) == (["out", "x", "out"], ["dlq"])
    assert producer.poll(0.1) == 2 and a.polled == b.polled == [0.05]
    assert producer.flush(1.0) == 4
    producer.close()
    assert a.closed and b.closed
    with pytest.raises(KeyError):
        producer.produce("unrouted", b"v")


# --------------------------------------------------------------------------- secrets and hash


def test_secrets_stay_masked_in_repr_json_and_validate_output(
    tmp_path: Path, config_file: Path
) -> None:
    spec = load(tmp_path, config_file, dead_letter={"topic": "d", "cluster": "backup-eu"})
    assert SECRET not in repr(spec) and SECRET not in str(spec)
    assert SECRET not in json.dumps(spec.model_dump(mode="json"))
    assert SECRET not in repr(spec.producer_target(spec.output or spec.dead_letter))
    assert SECRET not in repr(load_platform_config(config_file, env=ENV))
    env = {**ENV, "LANEHOUSE_CONFIG": str(config_file), "COLUMNS": "200"}
    result = CliRunner().invoke(app, ["validate", str(tmp_path / "spec.yaml")], env=env)
    assert result.exit_code == 0, result.output
    assert "at eu-1:9093,eu-2:9093 (cluster prod-eu)" in result.output
    assert SECRET not in result.output


def test_spec_hash_follows_the_cluster_but_never_holds_the_secret(
    tmp_path: Path, config_file: Path
) -> None:
    before = spec_hash(load(tmp_path, config_file))
    assert before == spec_hash(load(tmp_path, config_file))
    rotated = spec_hash(
        load(
            tmp_path,
            config_file,
            env={"KAFKA_PASSWORD": "new", "LANEHOUSE_CONFIG": str(config_file)},
        )
    )
    assert rotated != before
    data = platform_data()
    data["clusters"]["prod-eu"]["producer"]["linger.ms"] = 21
    retuned = write(tmp_path / "retuned.yaml", data)
    assert spec_hash(load(tmp_path, retuned)) not in (before, rotated)
    unused = write(
        tmp_path / "unused.yaml", platform_data(other={"kind": "kafka", "bootstrap_servers": "x:1"})
    )
    assert spec_hash(load(tmp_path, unused)) == before  # a cluster the spec does not name
    for digest in (before, rotated):
        assert SECRET not in digest


def test_the_registry_rereads_specs_when_the_platform_config_changes(
    tmp_path: Path, config_file: Path
) -> None:
    specs = tmp_path / "specs"
    specs.mkdir()
    write(specs / "clicks.yaml", spec_data())
    env = {**ENV, "LANEHOUSE_CONFIG": str(config_file)}
    cache = SpecCache()
    before = read_registry(specs, env=env, cache=cache).workloads["clicks"].hash
    write(config_file, platform_data(password="${KAFKA_PASSWORD}-rotated"))
    after = read_registry(specs, env=env, cache=cache).workloads["clicks"].hash
    assert before != after


# --------------------------------------------------------------------------- errors


def test_an_unknown_cluster_names_the_field_and_the_known_ones(
    tmp_path: Path, config_file: Path
) -> None:
    exc = error(tmp_path, config_file, source={"cluster": "prod-us", "topics": ["t"]})
    assert exc.field == "source.cluster"
    assert "unknown cluster 'prod-us'" in exc.reason
    assert "backup-eu, prod-eu, pulsar-eu" in exc.reason
    exc = error(tmp_path, config_file, output={"topic": "o", "cluster": "nowhere"})
    assert exc.field == "output.cluster" and "unknown cluster 'nowhere'" in exc.reason


def test_a_cluster_of_the_wrong_kind_is_refused(tmp_path: Path, config_file: Path) -> None:
    source = {"kind": "kafka", "cluster": "pulsar-eu", "topics": ["t"]}
    exc = error(tmp_path, config_file, source=source)
    assert exc.field == "source.cluster"
    assert "'pulsar-eu' is a pulsar cluster, but source.kind is kafka" in exc.reason


@pytest.mark.parametrize("section", ["output", "dead_letter"])
def test_an_output_or_dead_letter_on_a_cluster_of_another_kind_is_refused(
    tmp_path: Path, config_file: Path, section: str
) -> None:
    exc = error(tmp_path, config_file, **{section: {"topic": "t2", "cluster": "pulsar-eu"}})
    assert exc.file == str(tmp_path / "spec.yaml")
    assert exc.field == f"{section}.cluster"
    assert "is a pulsar cluster, but the source reads kafka" in exc.reason


def test_an_unset_secret_in_the_platform_config_names_that_file_and_field(
    tmp_path: Path, config_file: Path
) -> None:
    with pytest.raises(SpecError) as info:
        load(tmp_path, config_file, env={"LANEHOUSE_CONFIG": str(config_file)})
    assert info.value.file == str(config_file)
    assert info.value.field == "clusters.prod-eu.config.sasl.password"
    assert "KAFKA_PASSWORD is not set" in info.value.reason


def test_both_inline_servers_and_a_cluster_are_refused(tmp_path: Path, config_file: Path) -> None:
    source = {"cluster": "prod-eu", "bootstrap_servers": "x:9092", "topics": ["t"]}
    exc = error(tmp_path, config_file, source=source)
    assert exc.field == "source.cluster"
    assert "either cluster or bootstrap_servers, not both" in exc.reason


def test_cluster_and_sink_properties_are_checked_by_the_one_rule(
    tmp_path: Path, config_file: Path
) -> None:
    bad = platform_data()
    bad["clusters"]["prod-eu"]["producer"]["group.id"] = "x"
    with pytest.raises(SpecError) as info:
        load_platform_config(write(tmp_path / "bad.yaml", bad), env=ENV)
    assert info.value.field == "clusters.prod-eu.producer"
    assert "'group.id' is owned by the engine" in info.value.reason
    exc = error(
        tmp_path, config_file, dead_letter={"topic": "d", "config": {"enable.auto.commit": True}}
    )
    assert (
        exc.field == "dead_letter" and "'enable.auto.commit' is owned by the engine" in exc.reason
    )


def test_a_spec_cannot_declare_clusters_itself(tmp_path: Path, config_file: Path) -> None:
    exc = error(tmp_path, config_file, clusters={"mine": {"kind": "kafka"}})
    assert exc.field == "clusters" and "platform config file" in exc.reason


def test_one_topic_name_on_two_clusters_is_refused(tmp_path: Path, config_file: Path) -> None:
    exc = error(
        tmp_path,
        config_file,
        output={"topic": "same"},
        dead_letter={"topic": "same", "cluster": "backup-eu"},
    )
    assert "one topic name with two producers" in exc.reason


def test_a_model_built_in_code_must_carry_the_clusters_it_names() -> None:
    data = spec_data(
        source={"cluster": "prod-eu", "kind": "kafka", "bootstrap_servers": "a:1", "topics": ["t"]}
    )
    with pytest.raises(ValueError, match="cluster 'prod-eu' is named but not among clusters"):
        WorkloadSpec.model_validate(data)


# --------------------------------------------------------------------------- the examples


def test_the_example_workloads_run_on_the_compose_and_the_up_configs(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from orchestration.local.instance import prepare_platform_config

    repo = Path(__file__).resolve().parents[2]
    monkeypatch.chdir(tmp_path)  # no ./lanehouse.yaml: `up` writes its own
    monkeypatch.delenv("LANEHOUSE_CONFIG", raising=False)
    generated = prepare_platform_config(tmp_path / "state")
    postgres = {"POSTGRES_USER": "u", "POSTGRES_PASSWORD": "p", "POSTGRES_DB": "d"}
    for config, env, kafka in [
        (generated, {"KAFKA_BOOTSTRAP": "127.0.0.1:19092"}, "127.0.0.1:19092"),
        (repo / "deploy" / "lanehouse.yaml", postgres, "kafka:9092"),
    ]:
        env = {**env, "LANEHOUSE_CONFIG": str(config)}
        specs = load_specs([repo / "workloads"], env=env, import_handler=False)
        assert {s.name: s.source.cluster for s in specs} == {
            "clickstream": "kafka",
            "orders": "pulsar",
        }
        assert isinstance(specs[0].source, KafkaSourceSpec)
        assert specs[0].source.bootstrap_servers == kafka
