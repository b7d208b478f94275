"""The lake under Dagster and Spark: landed topics as assets, the Spark assets and their
checks, the tables on disk, the Spark session's configuration, automation (sensor, schedules)
and backfills over a day range."""
