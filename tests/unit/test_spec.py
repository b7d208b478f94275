"""The workload spec contract: what loads, and the SpecError (file + field) for what does not."""

from __future__ import annotations

import traceback
import uuid
from pathlib import Path
from typing import Any

import pytest
import yaml
from hypothesis import given
from hypothesis import strategies as st
from pydantic import SecretStr, ValidationError

from consumers import (
    KafkaSourceSpec,
    PulsarSourceSpec,
    SpecError,
    WorkloadSpec,
    load_spec,
    load_specs,
)
from consumers.config.loading import interpolate, parse_duration, read_yaml_mapping
from consumers.config.spec import resolve_handler, spec_hash
from tests import handlers

pytestmark = pytest.mark.unit

SECRET = "hunter2"


def spec_data(**overrides: Any) -> dict[str, Any]:
    data: dict[str, Any] = {
        "name": "clickstream",
        "source": {
            "kind": "kafka",
            "bootstrap_servers": "127.0.0.1:9092",
            "topics": ["clickstream.events"],
        },
        "handler": "tests.handlers:noop",
    }
    data.update(overrides)
    return data


def source(**overrides: Any) -> dict[str, Any]:
    return {**spec_data()["source"], **overrides}


def write(tmp_path: Path, data: dict[str, Any] | str, filename: str = "spec.yaml") -> Path:
    path = tmp_path / filename
    path.write_text(data if isinstance(data, str) else yaml.safe_dump(data, sort_keys=False))
    return path


def load_error(path: Path, **kwargs: Any) -> SpecError:
    with pytest.raises(SpecError) as info:
        load_spec(path, env=kwargs.pop("env", {}), **kwargs)
    assert info.value.file == str(path)
    assert str(path) in str(info.value)
    return info.value


def spec_error(tmp_path: Path, data: dict[str, Any] | str, **kwargs: Any) -> SpecError:
    return load_error(write(tmp_path, data), **kwargs)


# --- what loads ----------------------------------------------------------------------------


def test_minimal_spec_gets_documented_defaults(tmp_path: Path) -> None:
    spec = load_spec(write(tmp_path, spec_data()), env={})
    assert isinstance(spec.source, KafkaSourceSpec)
    assert spec.source.group == "lanehouse.clickstream"
    assert spec.source.topics == ("clickstream.events",)
    assert spec.source.config == {}
    assert (spec.ordering, spec.virtual_partitions, spec.concurrency) == ("key", 0, 100)
    assert (spec.permits.pool, spec.permits.weight) == ("default", 1.0)
    assert (spec.timeout, spec.commit_interval, spec.drain_timeout) == (30.0, 1.0, 30.0)
    assert spec.max_buffered is None  # default_max_buffered(concurrency)
    assert spec.enabled is True


def test_full_spec_loads_every_field(tmp_path: Path) -> None:
    text = """
name: clickstream
source:
  kind: kafka
  bootstrap_servers: ${KAFKA_BOOTSTRAP:-127.0.0.1:9092}
  topics: [clickstream.events, clickstream.other]
  group: analytics.clicks
  config: {fetch.min.bytes: 1024, client.id: lanehouse, check.crcs: true}
handler: tests.handlers:sync_noop
ordering: key
virtual_partitions: 64
concurrency: 300
permits: {pool: shared-pool, weight: 2.5}
timeout: 250ms
enabled: false
max_buffered: 500
commit_interval: 2s
drain_timeout: 0
"""
    spec = load_spec(write(tmp_path, text), env={})
    assert isinstance(spec.source, KafkaSourceSpec)
    assert spec.source.bootstrap_servers == "127.0.0.1:9092"
    assert spec.source.group == "analytics.clicks"
    assert spec.virtual_partitions == 64
    assert spec.concurrency == 300
    assert (spec.permits.pool, spec.permits.weight) == ("shared-pool", 2.5)
    assert (spec.timeout, spec.commit_interval, spec.drain_timeout) == (0.25, 2.0, 0.0)
    assert spec.enabled is False
    assert spec.client_config() == {
        "fetch.min.bytes": 1024,
        "client.id": "lanehouse",
        "check.crcs": True,
        "bootstrap.servers": "127.0.0.1:9092",
        "group.id": "analytics.clicks",
        "enable.auto.commit": False,
        "enable.auto.offset.store": False,
    }


def test_spec_is_frozen(tmp_path: Path) -> None:
    spec = load_spec(write(tmp_path, spec_data()), env={})
    with pytest.raises(ValidationError):
        spec.concurrency = 5


def test_example_workload_is_valid() -> None:
    root = Path(__file__).resolve().parents[2]
    spec = load_spec(root / "workloads" / "clickstream.yaml", env={}, import_handler=False)
    assert (spec.name, spec.ordering, spec.concurrency) == ("clickstream", "key", 300)
    assert spec.source.topics == ("clickstream.events",)
    assert spec.handler == "consumers.dev.examples:land_in_key_order"
    assert spec.landing is not None and spec.landing.dataset == "clickstream"


@pytest.mark.parametrize(
    ("text", "seconds"),
    [
        ("250ms", 0.25),
        ("2s", 2.0),
        ("1.5s", 1.5),
        ("5m", 300.0),
        ("1h", 3600.0),
        (3, 3.0),
        ("2", 2.0),
    ],
)
def test_durations(tmp_path: Path, text: str | int, seconds: float) -> None:
    assert load_spec(write(tmp_path, spec_data(timeout=text)), env={}).timeout == seconds


@given(st.integers(min_value=0, max_value=10**9))
def test_duration_units_agree(n: int) -> None:
    assert parse_duration(f"{n}ms") == pytest.approx(n / 1000)
    assert parse_duration(f"{n}m") == parse_duration(n * 60) == parse_duration(f"{n * 60}s")


# --- field errors: each names the file and the field ---------------------------------------


@pytest.mark.parametrize(
    ("data", "field", "words"),
    [
        (spec_data(concurency=3), "concurency", "did you mean 'concurrency'"),
        (spec_data(source=source(topic=["x"])), "source.topic", "unknown field"),
        (spec_data(permits={"pool": "a", "wieght": 2}), "permits.wieght", "unknown field"),
        (spec_data(name="../x"), "name", "lowercase letters, digits"),
        (spec_data(name="Clicks"), "name", "file paths"),
        (spec_data(source=source(topics=[])), "source.topics", "at least one topic"),
        (spec_data(source=source(topics=["bad topic"])), "source.topics", "Kafka topic name"),
        (spec_data(source=source(topics=[".."])), "source.topics", "Kafka topic name"),
        (spec_data(source=source(topics=["t" * 250])), "source.topics", "Kafka topic name"),
        (spec_data(source=source(topics=["a", "a"])), "source.topics", "more than once"),
        (spec_data(source=source(kind="kinesis")), "source.kind", "'kafka' or 'pulsar'"),
        (spec_data(ordering="keyed"), "ordering", "'key', 'partition' or 'none'"),
        (spec_data(ordering="partition", virtual_partitions=8), "virtual_partitions", "key"),
        (spec_data(virtual_partitions=-1), "virtual_partitions", "greater than or equal"),
        (spec_data(concurrency=0), "concurrency", "greater than or equal to 1"),
        (spec_data(max_buffered=0), "max_buffered", "greater than or equal to 1"),
        (spec_data(executor="fork"), "executor", "'auto', 'thread' or 'process'"),
        (spec_data(processes=2), "processes", "only for executor: process"),
        (spec_data(max_handoff_bytes=1024), "max_handoff_bytes", "only for executor: process"),
        (spec_data(executor="process", processes=-1), "processes", "greater than or equal to 0"),
        (spec_data(permits={"weight": 0}), "permits.weight", "greater than 0"),
        (spec_data(permits={"pool": "../p"}), "permits.pool", "lowercase letters"),
        (spec_data(timeout="fast"), "timeout", "invalid duration"),
        (spec_data(timeout="1d"), "timeout", "invalid duration"),
        (spec_data(timeout="-1s"), "timeout", "negative"),
        (spec_data(drain_timeout=-5), "drain_timeout", "negative"),
        (spec_data(commit_interval=True), "commit_interval", "invalid duration"),
        (spec_data(timeout=0), "timeout", "greater than 0"),
        (spec_data(handler="tests.handlers.noop"), "handler", "package.module:callable"),
        (
            spec_data(source={"kind": "kafka", "topics": ["t"]}),
            "source.bootstrap_servers",
            "required",
        ),
        (spec_data(source=source(config={"x": [1]})), "source.config", "string, number or boolean"),
    ],
)
def test_invalid_field(tmp_path: Path, data: dict[str, Any], field: str, words: str) -> None:
    err = spec_error(tmp_path, data, import_handler=False)
    assert err.field == field
    assert words in err.reason


@pytest.mark.parametrize(
    ("key", "why"),
    [
        ("enable.auto.commit", "durable"),
        ("enable.auto.offset.store", "watermark"),
        ("group.id", "source.group"),
        ("bootstrap.servers", "source.bootstrap_servers"),
    ],
)
def test_engine_owned_client_keys_are_rejected(tmp_path: Path, key: str, why: str) -> None:
    err = spec_error(tmp_path, spec_data(source=source(config={key: "x"})))
    assert err.field == "source.config"
    assert key in err.reason
    assert "owned by the engine" in err.reason
    assert why in err.reason


def pulsar_source(**overrides: Any) -> dict[str, Any]:
    return {
        "kind": "pulsar",
        "service_url": "pulsar://127.0.0.1:6650",
        "topics": ["orders"],
        **overrides,
    }


def test_pulsar_source_gets_full_topic_names_and_a_default_subscription(tmp_path: Path) -> None:
    data = spec_data(
        source=pulsar_source(
            topics=["orders", "persistent://acme/sales/returns"],
            config={"receiver_queue_size": 500, "io_threads": 2, "initial_position": "latest"},
        ),
        dead_letter={"topic": "orders-dlq"},
        output={"topic": "persistent://acme/sales/enriched"},
    )
    spec = load_spec(write(tmp_path, data), env={})
    assert spec.source.kind == "pulsar"
    assert spec.source.topics == (
        "persistent://public/default/orders",
        "persistent://acme/sales/returns",
    )
    assert spec.source.subscription == "lanehouse.clickstream"
    assert spec.source.subscription_type == "shared"
    assert spec.source.client_options() == {"io_threads": 2}
    assert spec.source.consumer_options() == {
        "receiver_queue_size": 500,
        "initial_position": "latest",
    }
    assert spec.dead_letter is not None and spec.output is not None
    assert spec.dead_letter.topic == "persistent://public/default/orders-dlq"
    assert spec.output.topic == "persistent://acme/sales/enriched"
    with pytest.raises(TypeError, match="Pulsar"):
        spec.client_config()


def test_pulsar_auth_token_is_a_secret(tmp_path: Path) -> None:
    data = spec_data(source=pulsar_source(config={"auth_token": SECRET}))
    spec = load_spec(write(tmp_path, data), env={})
    assert isinstance(spec.source.config["auth_token"], SecretStr)
    assert SECRET not in repr(spec) and SECRET not in str(spec.model_dump(mode="json"))
    assert SECRET not in spec_hash(spec)
    assert isinstance(spec.source, PulsarSourceSpec)
    assert spec.source.client_options() == {"auth_token": SECRET}


@pytest.mark.parametrize(
    ("source_data", "field", "words"),
    [
        (pulsar_source(service_url="http://x:8080"), "source.service_url", "pulsar://"),
        (pulsar_source(topics=["a/b"]), "source.topics", "persistent://tenant/namespace/topic"),
        (pulsar_source(topics=["non-persistent://public/default/x"]), "source.topics", "tenant"),
        (
            pulsar_source(topics=["orders", "persistent://public/default/orders"]),
            "source.topics",
            "more than once",
        ),
        (pulsar_source(subscription_type="round_robin"), "source.subscription_type", "'shared'"),
        (pulsar_source(config={"recv_queue": 1}), "source.config", "unknown Pulsar option"),
        (pulsar_source(config={"consumer_type": "x"}), "source.config", "subscription_type"),
        (
            pulsar_source(config={"unacked_messages_timeout_ms": 1}),
            "source.config",
            "owned by the engine",
        ),
        (pulsar_source(config={"receiver_queue_size": "big"}), "source.config", "integer"),
        (pulsar_source(config={"use_tls": 1}), "source.config", "true or false"),
        (pulsar_source(config={"initial_position": "middle"}), "source.config", "earliest"),
        (pulsar_source(bootstrap_servers="x:9092"), "source.bootstrap_servers", "unknown field"),
        ({"kind": "pulsar", "topics": ["t"]}, "source.service_url", "required"),
    ],
)
def test_invalid_pulsar_source(
    tmp_path: Path, source_data: dict[str, Any], field: str, words: str
) -> None:
    err = spec_error(tmp_path, spec_data(source=source_data), import_handler=False)
    assert err.field == field
    assert words in err.reason


def test_pulsar_sink_topics_are_checked_as_pulsar_topics(tmp_path: Path) -> None:
    data = spec_data(source=pulsar_source(), dead_letter={"topic": "a/b"})
    err = spec_error(tmp_path, data, import_handler=False)
    assert err.field == "dead_letter"
    assert "Pulsar topic" in err.reason
    looping = spec_data(
        source=pulsar_source(), output={"topic": "persistent://public/default/orders"}
    )
    assert "would loop" in spec_error(tmp_path, looping, import_handler=False).reason


# --- environment interpolation -------------------------------------------------------------


def test_missing_env_var_names_file_field_and_variable(tmp_path: Path) -> None:
    data = spec_data(source=source(bootstrap_servers="${KAFKA_BOOTSTRAP}"))
    err = spec_error(tmp_path, data)
    assert err.field == "source.bootstrap_servers"
    assert "KAFKA_BOOTSTRAP" in err.reason


def test_missing_env_var_in_a_list_names_the_index(tmp_path: Path) -> None:
    err = spec_error(tmp_path, spec_data(source=source(topics=["ok", "${TOPIC}"])))
    assert err.field == "source.topics[1]"


def test_env_value_and_default(tmp_path: Path) -> None:
    data = spec_data(
        source=source(bootstrap_servers="${BROKER:-localhost:9092}", topics=["${TOPIC}.v1"]),
        concurrency="${CONCURRENCY:-7}",
    )
    path = write(tmp_path, data)
    spec = load_spec(path, env={"TOPIC": "clicks"})
    assert isinstance(spec.source, KafkaSourceSpec)
    assert spec.source.bootstrap_servers == "localhost:9092"
    assert spec.source.topics == ("clicks.v1",)
    assert spec.concurrency == 7
    spec = load_spec(path, env={"TOPIC": "clicks", "BROKER": "kafka:9093", "CONCURRENCY": ""})
    assert isinstance(spec.source, KafkaSourceSpec)
    assert spec.source.bootstrap_servers == "kafka:9093"
    assert spec.concurrency == 7  # `:-` also covers a variable set to the empty string


def test_process_environment_is_the_default(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("LANEHOUSE_TEST_BROKER", "from-env:9092")
    path = write(tmp_path, spec_data(source=source(bootstrap_servers="${LANEHOUSE_TEST_BROKER}")))
    kafka = load_spec(path).source
    assert isinstance(kafka, KafkaSourceSpec)
    assert kafka.bootstrap_servers == "from-env:9092"


def test_double_dollar_escapes_a_literal_reference(tmp_path: Path) -> None:
    data = spec_data(source=source(config={"client.id": "$${NOT_A_VAR}-$x"}))
    spec = load_spec(write(tmp_path, data), env={})
    assert spec.source.config["client.id"] == "${NOT_A_VAR}-$x"


@pytest.mark.parametrize("text", ["${UNCLOSED", "${1BAD}", "${}"])
def test_malformed_references(tmp_path: Path, text: str) -> None:
    err = spec_error(tmp_path, spec_data(source=source(group=text)))
    assert err.field == "source.group"
    assert "${" in err.reason


@given(st.text().filter(lambda s: "$" not in s))
def test_text_without_dollar_is_unchanged(text: str) -> None:
    assert interpolate({"a": [text]}, {}, "f.yaml") == {"a": [text]}


# --- handlers --------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("target", "expected"), [("noop", handlers.noop), ("sync_noop", handlers.sync_noop)]
)
def test_handler_resolves_async_and_sync(tmp_path: Path, target: str, expected: object) -> None:
    spec = load_spec(write(tmp_path, spec_data(handler=f"tests.handlers:{target}")), env={})
    assert resolve_handler(spec) is expected


def test_missing_handler_module(tmp_path: Path) -> None:
    missing = f"no_such_module_{uuid.uuid4().hex}"
    err = spec_error(tmp_path, spec_data(handler=f"{missing}:handle"))
    assert err.field == "handler"
    assert missing in err.reason
    assert "ModuleNotFoundError" in err.reason


@pytest.mark.parametrize(
    ("target", "words"),
    [
        ("tests.handlers:missing", "no attribute 'missing'"),
        ("tests.handlers:not_callable", "not a callable"),
    ],
)
def test_bad_handler_attribute(tmp_path: Path, target: str, words: str) -> None:
    err = spec_error(tmp_path, spec_data(handler=target))
    assert err.field == "handler"
    assert target in err.reason
    assert words in err.reason


def test_handler_module_raising_at_import(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    module = f"boom_{uuid.uuid4().hex}"
    (tmp_path / f"{module}.py").write_text("raise RuntimeError('kaboom at import')\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    err = spec_error(tmp_path, spec_data(handler=f"{module}:handle"))
    assert err.field == "handler"
    assert f"{module}:handle" in err.reason
    assert "RuntimeError: kaboom at import" in err.reason
    assert isinstance(err.__cause__, RuntimeError)


def test_handler_without_colon_fails_even_without_import(tmp_path: Path) -> None:
    err = spec_error(tmp_path, spec_data(handler="tests.handlers"), import_handler=False)
    assert err.field == "handler"


def test_import_handler_false_skips_the_import(tmp_path: Path) -> None:
    spec = load_spec(
        write(tmp_path, spec_data(handler="not_there.at_all:fn")), env={}, import_handler=False
    )
    with pytest.raises(SpecError) as info:
        resolve_handler(spec)
    assert info.value.field == "handler"
    assert "clickstream" in info.value.file


# --- files -----------------------------------------------------------------------------------


def test_duplicate_names_across_files(tmp_path: Path) -> None:
    first = write(tmp_path, spec_data(), "a.yaml")
    second = write(tmp_path, spec_data(concurrency=5), "b.yaml")
    with pytest.raises(SpecError) as info:
        load_specs([first, second], env={})
    assert info.value.field == "name"
    assert str(first) in str(info.value)
    assert str(second) in str(info.value)


def test_load_specs_reads_a_directory_in_name_order(tmp_path: Path) -> None:
    write(tmp_path, spec_data(name="b"), "b.yml")
    write(tmp_path, spec_data(name="a"), "a.yaml")
    (tmp_path / "notes.txt").write_text("not a spec")
    assert [s.name for s in load_specs([tmp_path], env={})] == ["a", "b"]


@pytest.mark.parametrize(
    ("text", "words"),
    [
        ("name: [unclosed\n", "invalid YAML at line"),
        ("- just\n- a list\n", "mapping"),
        ("", "empty"),
        ("name: a\nname: b\n", "duplicate key 'name'"),
    ],
)
def test_unreadable_yaml(tmp_path: Path, text: str, words: str) -> None:
    err = spec_error(tmp_path, text)
    assert err.field == ""
    assert words in err.reason


def test_missing_file(tmp_path: Path) -> None:
    err = load_error(tmp_path / "nope.yaml")
    assert "not found" in err.reason


def test_yaml_merge_keys_are_not_duplicates(tmp_path: Path) -> None:
    text = "base: &b {a: 1, b: 2}\nderived:\n  <<: *b\n  b: 3\n"
    data = read_yaml_mapping(write(tmp_path, text))
    assert data["derived"] == {"a": 1, "b": 3}


# --- secrets ---------------------------------------------------------------------------------


def secret_spec(tmp_path: Path, config: dict[str, Any] | None = None, **overrides: Any) -> Path:
    if config is None:
        config = {
            "security.protocol": "SASL_SSL",
            "sasl.username": "svc",
            "sasl.password": "${KAFKA_PASSWORD}",
            "ssl.key.password": "${KAFKA_PASSWORD}",
            "sasl.oauthbearer.config": "${KAFKA_PASSWORD}",
            "my.client.secret": "${KAFKA_PASSWORD}",
        }
    return write(tmp_path, spec_data(source=source(config=config), **overrides))


def test_secrets_are_masked_everywhere_but_client_config(tmp_path: Path) -> None:
    spec = load_spec(secret_spec(tmp_path), env={"KAFKA_PASSWORD": SECRET})
    secret_keys = [
        "sasl.password",
        "ssl.key.password",
        "sasl.oauthbearer.config",
        "my.client.secret",
    ]
    for key in secret_keys:
        assert isinstance(spec.source.config[key], SecretStr)
    assert spec.source.config["sasl.username"] == "svc"
    for text in (repr(spec), str(spec), str(spec.model_dump(mode="json")), repr(spec.source)):
        assert SECRET not in text
    client = spec.client_config()
    assert all(client[key] == SECRET for key in secret_keys)


@pytest.mark.parametrize(
    "overrides",
    [
        {"name": "../x"},
        {"concurrency": 0},
        {"config": {"sasl.password": "${KAFKA_PASSWORD}", "group.id": "x"}},
        {"config": {"sasl.password": "${KAFKA_PASSWORD}", "x.password": ["${KAFKA_PASSWORD}"]}},
        {"config": {"sasl.password": "${KAFKA_PASSWORD}"}, "concurrency": "many"},
    ],
)
def test_secret_values_never_reach_error_text(tmp_path: Path, overrides: dict[str, Any]) -> None:
    path = secret_spec(tmp_path, **overrides)
    err = load_error(path, env={"KAFKA_PASSWORD": SECRET})
    full_text = "".join(traceback.format_exception(err))
    assert SECRET not in full_text


# --- spec_hash -------------------------------------------------------------------------------


def test_spec_hash_is_stable_and_sensitive(tmp_path: Path) -> None:
    env = {"KAFKA_PASSWORD": SECRET}
    data = spec_data(
        timeout="2s", source=source(config={"a": 1, "sasl.password": "${KAFKA_PASSWORD}"})
    )
    reordered = dict(reversed(list(data.items())))
    reordered["source"] = dict(reversed(list(data["source"].items())))
    reordered["source"]["config"] = {"sasl.password": "${KAFKA_PASSWORD}", "a": 1}
    same = spec_data(timeout=2, source=source(config={"a": 1, "sasl.password": SECRET}))
    h = spec_hash(load_spec(write(tmp_path, data, "a.yaml"), env=env))
    assert h == spec_hash(load_spec(write(tmp_path, reordered, "b.yaml"), env=env))
    assert h == spec_hash(load_spec(write(tmp_path, same, "c.yaml"), env={}))
    assert len(h) == 16
    assert int(h, 16) >= 0
    changed = spec_hash(load_spec(write(tmp_path, {**data, "concurrency": 101}, "d.yaml"), env=env))
    rotated = spec_hash(load_spec(write(tmp_path, data, "e.yaml"), env={"KAFKA_PASSWORD": "new"}))
    assert len({h, changed, rotated}) == 3


def test_spec_hash_accepts_models_built_in_code() -> None:
    spec = WorkloadSpec.model_validate(spec_data())
    assert spec_hash(spec) == spec_hash(WorkloadSpec.model_validate(spec_data()))


def test_scheduled_replay_on_either_broker(tmp_path: Path) -> None:
    dead_letter = {"topic": "orders-dlq", "scheduled_replay": True, "max_replays": 5}
    kafka = load_spec(write(tmp_path, spec_data(dead_letter=dead_letter)), env={})
    assert kafka.dead_letter is not None
    assert (kafka.dead_letter.scheduled_replay, kafka.dead_letter.max_replays) == (True, 5)
    data = spec_data(source=pulsar_source(), dead_letter=dead_letter)
    pulsar = load_spec(write(tmp_path, data), env={}, import_handler=False)
    assert pulsar.dead_letter is not None and pulsar.dead_letter.scheduled_replay
    zero = spec_error(
        tmp_path, spec_data(dead_letter={"topic": "d", "max_replays": 0}), import_handler=False
    )
    assert zero.field == "dead_letter.max_replays"


def test_a_safety_valve_that_allows_no_dead_letter_is_refused(tmp_path: Path) -> None:
    data = spec_data(dead_letter={"topic": "d", "max_ratio": 0.2, "window": 4})
    err = spec_error(tmp_path, data, import_handler=False)
    assert err.field == "dead_letter"
    assert "allows no dead letter" in err.reason


# --- landing -------------------------------------------------------------------------------


def test_landing_defaults_and_an_optional_handler(tmp_path: Path) -> None:
    data = spec_data(landing={"dataset": "clickstream"})
    del data["handler"]
    spec = load_spec(write(tmp_path, data), env={})
    assert spec.landing is not None and spec.handler is None
    assert (spec.landing.flush_rows, spec.landing.flush_interval) == (50_000, 60.0)
    assert spec.landing.partition_by == "event_date"
    from consumers.landing.sink import land_as_is

    assert resolve_handler(spec) is land_as_is


@pytest.mark.parametrize(
    ("landing", "field", "words"),
    [
        ({"dataset": "../x"}, "landing.dataset", "lowercase letters, digits and '_'"),
        ({"dataset": "Click"}, "landing.dataset", "lowercase letters"),
        ({"dataset": "a-b"}, "landing.dataset", "Dagster asset key"),
        ({"dataset": "c", "flush_rows": 0}, "landing.flush_rows", "greater than or equal to 1"),
        ({"dataset": "c", "flush_interval": "0s"}, "landing.flush_interval", "greater than 0"),
        ({"dataset": "c", "partition_by": "hour"}, "landing.partition_by", "event_date"),
        ({"flush_rows": 5}, "landing.dataset", "required"),
    ],
)
def test_invalid_landing(tmp_path: Path, landing: dict[str, Any], field: str, words: str) -> None:
    err = spec_error(tmp_path, spec_data(landing=landing), import_handler=False)
    assert err.field == field
    assert words in err.reason


def test_a_handler_is_required_without_landing(tmp_path: Path) -> None:
    data = spec_data()
    del data["handler"]
    err = spec_error(tmp_path, data, import_handler=False)
    assert "handler: required unless" in str(err)


def test_landing_and_output_are_exclusive(tmp_path: Path) -> None:
    data = spec_data(landing={"dataset": "c"}, output={"topic": "out"})
    err = spec_error(tmp_path, data, import_handler=False)
    assert "either lands its records or forwards them" in str(err)


# --- executors: checked when the handler is imported ----------------------------------------


@pytest.mark.parametrize(
    ("handler", "executor", "words"),
    [
        ("tests.handlers:noop", "thread", "this handler is async def"),
        ("tests.handlers:noop", "process", "this handler is async def"),
        ("tests.handlers:local_handler", "process", "cannot be pickled"),
    ],
)
def test_a_handler_its_executor_cannot_run_is_an_error(
    tmp_path: Path, handler: str, executor: str, words: str
) -> None:
    err = spec_error(tmp_path, spec_data(handler=handler, executor=executor))
    assert err.field == "executor"
    assert words in err.reason


@pytest.mark.parametrize("executor", ["auto", "thread", "process"])
def test_a_plain_def_handler_runs_on_every_executor(tmp_path: Path, executor: str) -> None:
    spec = load_spec(
        write(tmp_path, spec_data(handler="tests.handlers:sync_noop", executor=executor))
    )
    assert spec.executor == executor
    assert resolve_handler(spec) is handlers.sync_noop


def test_a_closure_is_fine_on_threads(tmp_path: Path) -> None:
    spec = load_spec(write(tmp_path, spec_data(handler="tests.handlers:local_handler")))
    assert resolve_handler(spec) is handlers.local_handler


@pytest.mark.parametrize(
    ("replicas", "source_data", "words"),
    [
        (0, None, "at least 1 replica"),
        (True, None, "expected a number of replicas"),
        ({"min": 3, "max": 1}, None, "min (3) is above max (1)"),
        (65, None, "less than or equal to 64"),
        ({"min": 1, "max": 2, "target_lag": "soon"}, None, "invalid duration"),
        (2, "exclusive", "an exclusive Pulsar subscription admits one consumer"),
        (2, "shared", "breaks ordering: key"),
        ({"min": 1, "max": 3}, "failover", "autoscaling reads the lag of a Kafka consumer group"),
    ],
)
def test_bad_replicas_name_the_field(
    tmp_path: Path, replicas: Any, source_data: str | None, words: str
) -> None:
    data = spec_data(replicas=replicas)
    if source_data is not None:
        data["source"] = pulsar_source(subscription_type=source_data)
    err = spec_error(tmp_path, data, import_handler=False)
    assert err.field.startswith("replicas"), err
    assert words in err.reason, err


def test_replicas_stay_out_of_the_spec_hash(tmp_path: Path) -> None:
    one = load_spec(write(tmp_path, spec_data()), import_handler=False)
    three = load_spec(write(tmp_path, spec_data(replicas=3), "b.yaml"), import_handler=False)
    scaled = spec_data(replicas={"min": 1, "max": 4, "target_lag": "20s"})
    auto = load_spec(write(tmp_path, scaled, "c.yaml"), import_handler=False)
    assert (three.replicas.min, three.replicas.max, auto.replicas.autoscaled) == (3, 3, True)
    assert auto.replicas.target_lag == 20.0
    assert spec_hash(one) == spec_hash(three) == spec_hash(auto)
    assert spec_hash(one) != spec_hash(
        load_spec(write(tmp_path, spec_data(concurrency=7), "d.yaml"), import_handler=False)
    )


def test_owners_tags_and_check_thresholds_stay_out_of_the_spec_hash(tmp_path: Path) -> None:
    plain = load_spec(write(tmp_path, spec_data()), import_handler=False)
    described = spec_data(
        owners=["data@example.com", "team:growth"],
        tags={"domain": "shop", "tier": "1"},
        checks={"lag": 500, "pinned": "2m", "dead_letters": 0.25},
    )
    spec = load_spec(write(tmp_path, described, "b.yaml"), import_handler=False)
    assert spec.owners == ("data@example.com", "team:growth")
    assert (spec.checks.lag, spec.checks.pinned, spec.checks.dead_letters) == (500, 120.0, 0.25)
    assert (plain.checks.lag, plain.checks.pinned, plain.checks.dead_letters) == (10_000, 300, 0.5)
    assert spec_hash(plain) == spec_hash(spec)  # editing them restarts no run
    # What the spec accepts, Dagster accepts: the code location keeps loading.
    from orchestration.workloads.assets import workload_assets

    [asset] = workload_assets([spec])
    assert asset.owners == ["data@example.com", "team:growth"]
    assert {k: v for k, v in asset.tags.items() if "/" not in k} == {"domain": "shop", "tier": "1"}


@pytest.mark.parametrize(
    ("overrides", "field", "words"),
    [
        ({"owners": ["alice"]}, "owners[0]", "not an owner"),
        ({"owners": ["team:"]}, "owners[0]", "not an owner"),
        ({"owners": ["ops@x.engineering"]}, "owners[0]", "not an owner"),
        ({"tags": {"tier": "one two"}}, "tags", "not allowed as a tag value"),
        ({"tags": {"": "x"}}, "tags", "not allowed as a tag key"),
        ({"checks": {"lag": 0}}, "checks.lag", "greater than or equal to 1"),
        ({"checks": {"dead_letters": 1.5}}, "checks.dead_letters", "less than or equal to 1"),
        ({"checks": {"pinned": "soon"}}, "checks.pinned", "invalid duration"),
        ({"checks": {"lagg": 5}}, "checks.lagg", "did you mean 'lag'?"),
    ],
)
def test_bad_owners_tags_and_checks_name_the_field(
    tmp_path: Path, overrides: dict[str, Any], field: str, words: str
) -> None:
    err = spec_error(tmp_path, spec_data(**overrides), import_handler=False)
    assert err.field.startswith(field), err
    assert words in err.reason, err
