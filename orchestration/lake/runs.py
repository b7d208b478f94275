"""How Spark runs are kept to one at a time: the tag Lanehouse puts on them and the pool of
every Spark asset (a UI backfill carries no Lanehouse tag), which the instance limits
(:func:`orchestration.local.instance.instance_config` and ``deploy/``)."""

from __future__ import annotations

from typing import Final

#: Tag every Spark run launched by Lanehouse carries; at most ``SPARK_RUN_LIMIT`` run at once.
SPARK_RUN_TAG: Final = "lanehouse/spark"
SPARK_RUN_LIMIT: Final = 1
#: Pool of every Spark asset, so runs launched any way wait in the queue while
#: ``SPARK_RUN_LIMIT`` Spark runs are in progress.
SPARK_POOL: Final = "spark"
