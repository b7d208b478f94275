"""lanehouse.yaml: which pools are shared, validated with errors that name file and field."""

from __future__ import annotations

from pathlib import Path

import pytest

from consumers import LanehouseError, LocalPermitPool, PlatformConfig, SpecError
from consumers.config.platform import load_platform_config
from consumers.permits.shared import SharedPermitPool
from consumers.service.launch import pool_factory

pytestmark = pytest.mark.unit


def write(tmp_path: Path, text: str) -> Path:
    path = tmp_path / "lanehouse.yaml"
    path.write_text(text)
    return path


def test_no_file_means_every_pool_is_local(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(tmp_path)
    config = load_platform_config(env={})
    assert config.permits == PlatformConfig().permits
    assert pool_factory(config) is LocalPermitPool
    # ... and the clusters are the embedded brokers' defaults, which the example workloads name
    assert sorted(config.clusters) == ["kafka", "pulsar"]


def test_the_working_directory_file_and_env_references(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    write(
        tmp_path,
        "permits:\n  url: postgresql+psycopg2://lh:${PGPASS}@db/lh\n  lease_ttl: 5s\n"
        "  pools: {api: {size: 40}}\n",
    )
    monkeypatch.chdir(tmp_path)
    config = load_platform_config(env={"PGPASS": "pw"})
    assert config.permits.database_url() == "postgresql+psycopg2://lh:pw@db/lh"
    assert config.permits.lease_ttl == 5.0
    assert config.permits.pools["api"].size == 40


def test_default_url_is_sqlite_under_the_state_dir(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("LANEHOUSE_HOME", str(tmp_path / "state"))
    config = load_platform_config(write(tmp_path, "permits: {pools: {api: {size: 4}}}\n"), env={})
    assert config.permits.database_url() == f"sqlite:///{tmp_path / 'state' / 'permits.db'}"


@pytest.mark.parametrize(
    ("text", "field", "reason"),
    [
        ("permits: {url: 'mysql://x/y', pools: {}}\n", "permits.url", "SQLAlchemy URL"),
        ("permits: {pools: {Bad Name: {size: 1}}}\n", "permits.pools", "not allowed"),
        ("permits: {pools: {api: {size: 0}}}\n", "permits.pools.api.size", "greater than"),
        ("permits: {lease_ttl: 1s, sync_interval: 500ms}\n", "permits", "quarter of lease_ttl"),
        ("permits: {pool: {api: {size: 1}}}\n", "permits", "pool"),
        ("permits: {url: '${MISSING}'}\n", "permits.url", "MISSING is not set"),
    ],
)
def test_bad_files_name_file_and_field(tmp_path: Path, text: str, field: str, reason: str) -> None:
    path = write(tmp_path, text)
    with pytest.raises(SpecError) as caught:
        load_platform_config(path, env={})
    assert caught.value.file == str(path)
    assert caught.value.field.startswith(field), caught.value
    assert reason in caught.value.reason


def test_a_named_file_must_exist(tmp_path: Path) -> None:
    with pytest.raises(SpecError, match="file not found"):
        load_platform_config(env={"LANEHOUSE_CONFIG": str(tmp_path / "nope.yaml")})


def test_named_pools_are_shared_and_their_size_is_not_given_twice(tmp_path: Path) -> None:
    config = PlatformConfig.model_validate(
        {"permits": {"url": f"sqlite:///{tmp_path / 'p.db'}", "pools": {"api": {"size": 3}}}}
    )
    make = pool_factory(config)
    assert isinstance(make("api", 1000), SharedPermitPool)
    assert isinstance(make("other", 10), LocalPermitPool)
    with pytest.raises(LanehouseError, match="pool size of api is set in the platform config"):
        pool_factory(config, {"api": 5})
