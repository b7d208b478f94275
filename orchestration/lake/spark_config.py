"""The Spark assets' session settings, from the environment: local unless a cluster is named.

- ``LANEHOUSE_SPARK_MASTER``: the master, ``local[2]`` by default; ``spark://HOST:7077`` for a
  standalone cluster (docs/operations.md, "Spark on a standalone cluster").
- ``LANEHOUSE_SPARK_CONF``: extra Spark properties as a JSON object of ``spark.*`` keys, e.g.
  ``{"spark.executor.memory": "2g"}``. JSON rather than ``k=v,k=v`` because values such as
  ``spark.jars.packages`` or Java options contain commas and ``=``. They win over the defaults.
  Errors name the variable and the key, never a value.
- With a local master the session gets all of ``LOCAL_SPARK_CONF`` (and ``LOCAL_SPARK_ENV``) as
  it always did. With a cluster, the defaults that only hold when driver and executors share
  this machine are left out (``LOCAL_ONLY_KEYS``): loopback driver addresses (executors could
  not connect back), this interpreter's path for the executors' Python, and the parallelism
  sized for tiny local jobs.
- Keys that look secret (``looks_secret``) stay out of the resource's config, which the Dagster
  UI shows; the resource reads them from the environment when its run starts.
"""

from __future__ import annotations

import json
import os
import re
from collections.abc import Mapping
from typing import Final

from consumers.config.sources import is_secret_key
from spark_jobs import LOCAL_SPARK_CONF

SPARK_MASTER_ENV: Final = "LANEHOUSE_SPARK_MASTER"
SPARK_CONF_ENV: Final = "LANEHOUSE_SPARK_CONF"
DEFAULT_SPARK_MASTER: Final = "local[2]"
APP_NAME: Final = "lanehouse-lake"
#: ``LOCAL_SPARK_CONF`` keys never sent to a cluster (see the module docstring).
LOCAL_ONLY_KEYS: Final = frozenset(
    {
        "spark.driver.host",
        "spark.driver.bindAddress",
        "spark.pyspark.python",
        "spark.sql.shuffle.partitions",
        "spark.default.parallelism",
    }
)
#: Beyond the client markers every spec masks: Hadoop/cloud credentials (``fs.s3a.access.key``).
_SPARK_SECRET: Final = re.compile(r"passwd|credential|key", re.IGNORECASE)


def spark_master(env: Mapping[str, str] | None = None) -> str:
    env = os.environ if env is None else env
    return env.get(SPARK_MASTER_ENV, "").strip() or DEFAULT_SPARK_MASTER


def is_local(master: str) -> bool:
    """``local``, ``local[N]``, ``local[*]``, ``local[N,F]``, ``local-cluster[...]``."""
    return master == "local" or master.startswith(("local[", "local-cluster["))


def looks_secret(key: str) -> bool:
    """Whether a property's value must never be shown (``...secret.key``, ``...password``)."""
    return is_secret_key(key) or bool(_SPARK_SECRET.search(key))


def extra_spark_conf(env: Mapping[str, str] | None = None) -> dict[str, str]:
    """``LANEHOUSE_SPARK_CONF`` as string properties; empty or unset means none.

    Raises ``ValueError`` naming the variable (and the key) when it is not a JSON object of
    ``spark.*`` keys with string, number or boolean values, or when it sets ``spark.master``.
    """
    env = os.environ if env is None else env
    raw = env.get(SPARK_CONF_ENV, "").strip()
    if not raw:
        return {}
    try:
        data = json.loads(raw)
    except json.JSONDecodeError as exc:  # its message has a position, not the text
        raise ValueError(
            f"{SPARK_CONF_ENV} must be a JSON object like "
            f'{{"spark.executor.memory": "2g"}}: {exc.msg} at character {exc.pos}'
        ) from None
    if not isinstance(data, dict):
        raise ValueError(
            f"{SPARK_CONF_ENV} must be a JSON object of Spark properties, got a JSON "
            f"{type(data).__name__}"
        )
    conf: dict[str, str] = {}
    for key, value in data.items():
        if not key.startswith("spark.") or key == "spark.":
            raise ValueError(
                f"{SPARK_CONF_ENV}: {key!r} is not a Spark property (keys start with 'spark.')"
            )
        if key == "spark.master":
            raise ValueError(
                f"{SPARK_CONF_ENV}: set the master with {SPARK_MASTER_ENV}, not spark.master"
            )
        if isinstance(value, bool):
            conf[key] = "true" if value else "false"
        elif isinstance(value, str | int | float):
            conf[key] = str(value)
        else:
            raise ValueError(
                f"{SPARK_CONF_ENV}: {key!r} must be a string, number or boolean, "
                f"got a JSON {type(value).__name__}"
            )
    return conf


def session_conf(env: Mapping[str, str] | None = None) -> dict[str, str]:
    """Every property of the Spark assets' session, secrets included."""
    master = spark_master(env)
    defaults = {
        key: value
        for key, value in LOCAL_SPARK_CONF.items()
        if is_local(master) or key not in LOCAL_ONLY_KEYS
    }
    return {**defaults, "spark.app.name": APP_NAME, **extra_spark_conf(env), "spark.master": master}


def public_conf(conf: Mapping[str, str]) -> dict[str, str]:
    """``conf`` without the properties that look secret (what may be shown in the UI)."""
    return {key: value for key, value in conf.items() if not looks_secret(key)}


def secret_conf(conf: Mapping[str, str]) -> dict[str, str]:
    return {key: value for key, value in conf.items() if looks_secret(key)}
