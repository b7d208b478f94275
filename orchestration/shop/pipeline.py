"""The shop's pipeline as one ``Definitions``: its Spark assets, the ``spark_daily`` job, the
closed-day sensor, two schedules and the Spark resource. It reads the landed datasets
``SHOP_DATASETS``, which the platform defines (``lanehouse_definitions(datasets=...)``)."""

from __future__ import annotations

from dagster import Definitions

from orchestration.platform import spark_resource
from orchestration.shop.assets import SPARK_JOB, spark_assets
from orchestration.shop.automation import SCHEDULES, SENSORS


def shop_definitions() -> Definitions:
    """The pipeline alone; its landed inputs resolve when it is merged with the platform."""
    return Definitions(
        assets=spark_assets(),
        jobs=[SPARK_JOB],
        schedules=list(SCHEDULES),
        sensors=list(SENSORS),
        resources={"pyspark": spark_resource()},
    )
