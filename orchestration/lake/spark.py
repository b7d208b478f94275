"""The Spark session of lake assets, as a Dagster resource: the shop's Spark assets use it, and
so can a user's own (``resources={"pyspark": spark_resource()}``)."""

# No ``from __future__ import annotations``: Dagster reads the resource's field annotations.

from typing import Any, cast

from dagster import InitResourceContext
from dagster_pyspark import PySparkResource
from pyspark.sql import SparkSession

from orchestration.lake.spark_config import is_local, public_conf, secret_conf, session_conf
from spark_jobs import prepare_local_environment


class LakeSparkResource(PySparkResource):
    """``PySparkResource`` for lake assets (settings: ``orchestration.lake.spark_config``).

    With a local master it first puts ``LOCAL_SPARK_ENV`` in the environment the JVM inherits
    (never for a cluster: ``SPARK_LOCAL_IP=127.0.0.1`` would hide the driver from executors).
    Properties that look secret are not in ``spark_config`` (the UI shows it): they are read
    from ``LANEHOUSE_SPARK_CONF`` when the run starts. It never stops the session: one run
    (in-process executor) shares one.
    """

    def effective_conf(self) -> dict[str, str]:
        """What the session is built with: the config plus the secret properties."""
        return {**self.spark_config, **secret_conf(session_conf())}

    def setup_for_execution(self, context: InitResourceContext) -> None:
        conf = self.effective_conf()
        if is_local(str(conf.get("spark.master", ""))):
            prepare_local_environment()
        builder = SparkSession.builder
        for key, value in conf.items():
            builder = builder.config(key, value)
        self._spark_session = builder.getOrCreate()

    def session(self) -> SparkSession:
        return cast(SparkSession, self.spark_session)


def spark_resource() -> LakeSparkResource:
    """The lake assets' resource; a bad ``LANEHOUSE_SPARK_CONF`` stops the code location from
    loading with a ``ValueError`` naming it."""
    config: dict[str, Any] = public_conf(session_conf())
    return LakeSparkResource(spark_config=config)
