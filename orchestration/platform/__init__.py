"""Lanehouse in a Dagster project: the public orchestration API.

The platform, for a directory of workload specs:

- :func:`lanehouse_definitions`: the whole platform as a ``Definitions`` (merge your own next to
  it with ``Definitions.merge``);
- :class:`LanehouseComponent`: the same, declared in a ``defs.yaml``.

Landed datasets, for your own assets downstream of them:

- :func:`landed_key`: the asset key of a landed dataset (``deps=[landed_key("clickstream")]``);
- :data:`LAKE_PARTITIONS`: the lake's UTC day partitions, which landed datasets use;
- :func:`run_days`: the days of an asset's run (one partition or a single-run range);
- :func:`read_landed_days`: a dataset's landed rows of those days, as a PySpark DataFrame;
- :class:`LakeSparkResource` and :func:`spark_resource`: the Spark session for lake assets;
  :data:`SPARK_POOL` and :data:`SPARK_RUN_TAG` keep Spark runs to the instance's limit.

Tables of your own, day by day (what the shop's Spark assets do): :func:`table_root`,
:func:`read_days`, :func:`write_days`, :func:`row_counts`, :func:`total_rows`, and
:func:`table_schema` for ``dagster/column_schema``. :func:`platform_settings` says where the
workloads, the lake and the webserver are.
"""

from orchestration.lake.landed import (
    LAKE_PARTITIONS,
    lake_partitions,
    landed_key,
    read_landed_days,
    run_days,
    table_schema,
)
from orchestration.lake.runs import SPARK_POOL, SPARK_RUN_TAG
from orchestration.lake.spark import LakeSparkResource, spark_resource
from orchestration.lake.tables import (
    LandedDays,
    read_days,
    row_counts,
    table_root,
    total_rows,
    write_days,
)
from orchestration.platform.component import LanehouseComponent
from orchestration.platform.definitions import lanehouse_definitions
from orchestration.settings import PlatformSettings
from orchestration.settings import current as platform_settings

__all__ = [
    "LAKE_PARTITIONS",
    "SPARK_POOL",
    "SPARK_RUN_TAG",
    "LakeSparkResource",
    "LandedDays",
    "LanehouseComponent",
    "PlatformSettings",
    "lake_partitions",
    "landed_key",
    "lanehouse_definitions",
    "platform_settings",
    "read_days",
    "read_landed_days",
    "row_counts",
    "run_days",
    "spark_resource",
    "table_root",
    "table_schema",
    "total_rows",
    "write_days",
]
