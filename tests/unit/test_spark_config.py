"""The Spark assets' session settings from LANEHOUSE_SPARK_MASTER / LANEHOUSE_SPARK_CONF: local
runs keep exactly the settings they always had, a cluster never gets loopback addresses, and a
secret property is never shown (not in errors, not in the resource config the UI displays)."""

from __future__ import annotations

import pytest

from orchestration.lake.spark_config import (
    APP_NAME,
    LOCAL_ONLY_KEYS,
    extra_spark_conf,
    is_local,
    looks_secret,
    session_conf,
)
from spark_jobs import LOCAL_SPARK_CONF

pytestmark = pytest.mark.unit

CLUSTER = {"LANEHOUSE_SPARK_MASTER": "spark://spark-master:7077"}


def test_without_settings_the_session_is_the_local_one_it_always_was() -> None:
    assert session_conf({}) == {
        **LOCAL_SPARK_CONF,
        "spark.master": "local[2]",
        "spark.app.name": APP_NAME,
    }
    assert session_conf({"LANEHOUSE_SPARK_CONF": "  "}) == session_conf({})


def test_extra_properties_win_over_the_local_defaults() -> None:
    env = {
        "LANEHOUSE_SPARK_MASTER": "local[*]",
        "LANEHOUSE_SPARK_CONF": '{"spark.sql.shuffle.partitions": 8, "spark.ui.enabled": true}',
    }
    conf = session_conf(env)
    assert conf["spark.master"] == "local[*]"
    assert conf["spark.sql.shuffle.partitions"] == "8"
    assert conf["spark.ui.enabled"] == "true"
    assert conf["spark.driver.host"] == "127.0.0.1"  # still local: loopback is right


def test_a_cluster_gets_no_loopback_address_nor_this_machines_python() -> None:
    env = {**CLUSTER, "LANEHOUSE_SPARK_CONF": '{"spark.executor.memory": "2g"}'}
    conf = session_conf(env)
    assert conf["spark.master"] == "spark://spark-master:7077"
    assert conf["spark.executor.memory"] == "2g"
    assert conf["spark.sql.session.timeZone"] == "UTC"  # correctness, not locality: kept
    assert not LOCAL_ONLY_KEYS & set(conf)
    assert "127.0.0.1" not in conf.values()


def test_a_cluster_may_still_be_given_a_driver_address_explicitly() -> None:
    env = {**CLUSTER, "LANEHOUSE_SPARK_CONF": '{"spark.driver.host": "dagster-code"}'}
    assert session_conf(env)["spark.driver.host"] == "dagster-code"


@pytest.mark.parametrize(
    ("master", "local"),
    [
        ("local", True),
        ("local[2]", True),
        ("local[*]", True),
        ("local[4,2]", True),
        ("local-cluster[2,1,1024]", True),
        ("spark://spark-master:7077", False),
        ("yarn", False),
        ("k8s://https://10.0.0.1:6443", False),
    ],
)
def test_which_masters_are_local(master: str, local: bool) -> None:
    assert is_local(master) is local


@pytest.mark.parametrize(
    ("raw", "message"),
    [
        ('{"spark.executor.memory": "2g"', "must be a JSON object"),
        ('["spark.executor.memory=2g"]', "got a JSON list"),
        ("spark.executor.memory=2g", "must be a JSON object"),
        ('{"executor.memory": "2g"}', "'executor.memory' is not a Spark property"),
        ('{"spark.master": "local[4]"}', "LANEHOUSE_SPARK_MASTER"),
        ('{"spark.executor.memory": null}', "must be a string, number or boolean"),
    ],
)
def test_bad_settings_are_refused_naming_the_variable(raw: str, message: str) -> None:
    with pytest.raises(ValueError, match="LANEHOUSE_SPARK_CONF") as caught:
        extra_spark_conf({"LANEHOUSE_SPARK_CONF": raw})
    assert message in str(caught.value)


@pytest.mark.parametrize(
    "raw",
    [
        '{"spark.hadoop.fs.s3a.secret.key": "hunter2-s3cr3t"',  # unterminated JSON
        '{"spark.hadoop.fs.s3a.secret.key": ["hunter2-s3cr3t"]}',  # not a scalar
        '{"spark.ssl.keyPassword": "x", "hadoop.password": "hunter2-s3cr3t"}',  # bad key
    ],
)
def test_errors_never_show_a_value(raw: str) -> None:
    with pytest.raises(ValueError) as caught:
        extra_spark_conf({"LANEHOUSE_SPARK_CONF": raw})
    assert "hunter2" not in str(caught.value)


@pytest.mark.parametrize(
    ("key", "secret"),
    [
        ("spark.hadoop.fs.s3a.secret.key", True),
        ("spark.hadoop.fs.s3a.access.key", True),
        ("spark.ssl.keyPassword", True),
        ("spark.authenticate.secret", True),
        ("spark.kubernetes.authenticate.oauthToken", True),
        ("spark.executor.memory", False),
        ("spark.sql.shuffle.partitions", False),
    ],
)
def test_which_properties_look_secret(key: str, secret: bool) -> None:
    assert looks_secret(key) is secret


def test_secret_properties_reach_the_session_but_not_the_resource_config(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Dagster shows a resource's config in the UI: a secret must not be part of it."""
    from orchestration.lake.spark import spark_resource

    monkeypatch.setenv("LANEHOUSE_SPARK_MASTER", "spark://spark-master:7077")
    monkeypatch.setenv(
        "LANEHOUSE_SPARK_CONF",
        '{"spark.executor.memory": "2g", "spark.hadoop.fs.s3a.secret.key": "hunter2-s3cr3t"}',
    )
    resource = spark_resource()
    assert resource.spark_config["spark.executor.memory"] == "2g"
    assert "hunter2-s3cr3t" not in repr(resource.spark_config)
    assert resource.effective_conf()["spark.hadoop.fs.s3a.secret.key"] == "hunter2-s3cr3t"
    assert resource.effective_conf()["spark.master"] == "spark://spark-master:7077"


def test_a_bad_setting_stops_the_resource_from_being_built(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    from orchestration.lake.spark import spark_resource

    monkeypatch.setenv("LANEHOUSE_SPARK_CONF", '{"executor.memory": "2g"}')
    with pytest.raises(ValueError, match="LANEHOUSE_SPARK_CONF"):
        spark_resource()
