"""The lake under Dagster: its day partitions, what a landed dataset is to an asset downstream
of it, the tables on disk, and the Spark session (resource and configuration) of lake assets.
Its public names are re-exported by :mod:`orchestration.platform`."""
