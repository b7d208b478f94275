"""A local SparkSession with the settings this project needs, shared with the Dagster resource.

Why each setting (see NOTES.md, "Spark"):

- ``spark.pyspark.python``: Python workers otherwise run ``python3`` from PATH, not this venv.
- ``SPARK_LOCAL_IP``/``spark.driver.host``: bind to loopback, never to a guessed interface.
- ``spark.sql.session.timeZone=UTC``: timestamps print and parse in UTC, as the data is.
- four shuffle partitions: the default 200 makes tiny local jobs spend their time scheduling.
- no UI and no console progress bar: nobody looks at them here and they take a port and logs.
- ``log4j2.properties`` beside this module for the driver: warnings and errors, no start-up
  banner.
- PySpark's "does not yet fully support pandas >= 3.0.0" warning is silenced, for this reason
  only: the paths this project takes through pandas (``toPandas`` in the assets' checks and the
  tests, Arrow conversion) are exercised on pandas 3 by ``tests/integration/test_spark_jobs.py``
  and ``test_lake_assets.py`` and pass.

``LOCAL_SPARK_CONF`` is what ``PySparkResource(spark_config=...)`` receives, so tests and
Dagster runs use the same settings; ``LOCAL_SPARK_ENV`` must be in the environment before
the JVM starts, which ``local_spark_session`` sees to.
"""

from __future__ import annotations

import os
import sys
import warnings
from collections.abc import Mapping
from pathlib import Path
from typing import Final

from pyspark.sql import SparkSession

LOCAL_SPARK_ENV: Final[Mapping[str, str]] = {
    "PYSPARK_PYTHON": sys.executable,
    "SPARK_LOCAL_IP": "127.0.0.1",
}

#: The driver's logging configuration (see the module docstring).
LOG4J_CONFIG: Final = Path(__file__).with_name("log4j2.properties")

warnings.filterwarnings(
    "ignore", message="PySpark does not yet fully support pandas", category=FutureWarning
)

LOCAL_SPARK_CONF: Final[Mapping[str, str]] = {
    "spark.pyspark.python": sys.executable,
    "spark.pyspark.driver.python": sys.executable,
    "spark.driver.host": "127.0.0.1",
    "spark.driver.bindAddress": "127.0.0.1",
    "spark.sql.session.timeZone": "UTC",
    "spark.sql.shuffle.partitions": "4",
    "spark.default.parallelism": "4",
    "spark.ui.enabled": "false",
    "spark.ui.showConsoleProgress": "false",
    "spark.driver.extraJavaOptions": f"-Dlog4j2.configurationFile={LOG4J_CONFIG.as_uri()}",
}


def prepare_local_environment() -> None:
    """Put ``LOCAL_SPARK_ENV`` into ``os.environ`` unless already set (the JVM inherits it)."""
    for name, value in LOCAL_SPARK_ENV.items():
        os.environ.setdefault(name, value)


def local_spark_session(
    app_name: str,
    master: str = "local[2]",
    extra_conf: Mapping[str, str] | None = None,
) -> SparkSession:
    """Start (or reuse) the process's SparkSession with ``LOCAL_SPARK_CONF`` and ``extra_conf``.

    ``getOrCreate`` returns an existing session as is when one runs: static settings such as
    ``master`` then keep the values it was started with.
    """
    if not app_name:
        raise ValueError("app_name must not be empty")
    prepare_local_environment()
    builder = SparkSession.builder.appName(app_name).master(master)
    for key, value in {**LOCAL_SPARK_CONF, **(extra_conf or {})}.items():
        builder = builder.config(key, value)
    return builder.getOrCreate()
