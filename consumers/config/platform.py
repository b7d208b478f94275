"""The platform config file (``lanehouse.yaml``): settings shared by every process of a deployment.

It declares the cross-process permit pools and the named clusters::

    permits:
      url: postgresql+psycopg2://lanehouse:${POSTGRES_PASSWORD}@postgres/lanehouse
      pools:
        default: {size: 500}
        payments-api: {size: 40}
    clusters:
      prod-eu: {kind: kafka, bootstrap_servers: broker-1.eu:9093, config: {...}}

A pool named here is shared by every process that reads the same file (leased through the
database at ``url``); a pool not named here stays local to its process. A cluster named here is
what a spec's ``cluster: prod-eu`` means (:mod:`consumers.config.clusters`). Which file: the
``LANEHOUSE_CONFIG`` variable, else ``lanehouse.yaml`` in the working directory if present,
else none. String values take ``${VAR}`` references like workload specs, so the database
password and the clusters' secrets stay in the environment.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from pathlib import Path
from typing import Final

from pydantic import Field, ValidationError, field_validator, model_validator

from consumers.config.clusters import Cluster
from consumers.config.loading import (
    Duration,
    FrozenModel,
    first_error,
    interpolate,
    read_yaml_mapping,
    state_dir,
)
from consumers.config.names import Name
from consumers.errors import SpecError

CONFIG_ENV: Final = "LANEHOUSE_CONFIG"
DEFAULT_CONFIG_FILE: Final = Path("lanehouse.yaml")

#: The clusters declared when there is no platform config file: the embedded brokers' defaults
#: (``lanehouse broker``, ``up``, ``demo``), so the example workloads run without one.
DEFAULT_CLUSTERS: Final[Mapping[str, Mapping[str, str]]] = {
    "kafka": {"kind": "kafka", "bootstrap_servers": "${KAFKA_BOOTSTRAP:-127.0.0.1:9092}"},
    "pulsar": {"kind": "pulsar", "service_url": "${PULSAR_URL:-pulsar://127.0.0.1:6650}"},
}


class PoolConfig(FrozenModel):
    size: int = Field(ge=1, le=1_000_000)


def default_permits_url(home: Path | None = None) -> str:
    """SQLite under the state directory (``LANEHOUSE_HOME``, default ``.lanehouse``): enough
    for every process on one machine."""
    return f"sqlite:///{(state_dir(home) / 'permits.db').resolve()}"


class PermitsConfig(FrozenModel):
    """Where shared pools live and how their leases behave."""

    #: SQLAlchemy URL; empty means :func:`default_permits_url`.
    url: str = ""
    pools: dict[Name, PoolConfig] = Field(default_factory=dict)
    #: A holder that cannot renew for this long loses its permits to the others.
    lease_ttl: Duration = Field(default=10.0, ge=1.0, le=600.0)
    #: How often a holder reconciles its share with the database.
    sync_interval: Duration = Field(default=0.25, ge=0.01, le=60.0)

    @field_validator("url")
    @classmethod
    def _known_backend(cls, url: str) -> str:
        if url and not url.startswith(("sqlite://", "postgresql://", "postgresql+")):
            raise ValueError(
                "use a SQLAlchemy URL for SQLite (sqlite:///PATH) or PostgreSQL "
                "(postgresql+psycopg2://USER:${PASSWORD}@HOST/DB)"
            )
        return url

    @model_validator(mode="after")
    def _renewals_fit_the_lease(self) -> PermitsConfig:
        if self.sync_interval * 4 > self.lease_ttl:
            raise ValueError(
                f"sync_interval ({self.sync_interval:g} s) must be at most a quarter of "
                f"lease_ttl ({self.lease_ttl:g} s), so a slow renewal does not lose the lease"
            )
        return self

    def database_url(self) -> str:
        return self.url or default_permits_url()


class PlatformConfig(FrozenModel):
    permits: PermitsConfig = Field(default_factory=PermitsConfig)
    #: Brokers workload specs name with ``cluster:`` (see :mod:`consumers.config.clusters`).
    clusters: dict[Name, Cluster] = Field(default_factory=dict)


def config_path(env: Mapping[str, str] | None = None) -> Path | None:
    """The file to read: ``LANEHOUSE_CONFIG`` (which must exist), else ``./lanehouse.yaml``."""
    env = os.environ if env is None else env
    configured = env.get(CONFIG_ENV, "").strip()
    if configured:
        return Path(configured)
    return DEFAULT_CONFIG_FILE if DEFAULT_CONFIG_FILE.is_file() else None


def load_platform_config(
    path: Path | None = None, env: Mapping[str, str] | None = None
) -> PlatformConfig:
    """Read and validate the config file; no file means :func:`default_platform_config`."""
    env = os.environ if env is None else env
    path = path or config_path(env)
    if path is None:
        return default_platform_config(env)
    file = str(path)
    data = interpolate(read_yaml_mapping(file), env, file)
    try:
        return PlatformConfig.model_validate(data)
    except ValidationError as exc:
        raise SpecError(file, *first_error(exc, PlatformConfig)) from exc


def default_platform_config(env: Mapping[str, str]) -> PlatformConfig:
    """Without a file: every pool local, the clusters :data:`DEFAULT_CLUSTERS` (addresses from
    ``env``)."""
    file = "<default clusters>"
    data = interpolate({"clusters": dict(DEFAULT_CLUSTERS)}, env, file)
    try:
        return PlatformConfig.model_validate(data)
    except ValidationError as exc:  # e.g. PULSAR_URL set to something else than a Pulsar URL
        raise SpecError(file, *first_error(exc, PlatformConfig)) from exc
