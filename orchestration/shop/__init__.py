"""The demo shop's pipeline: Spark assets over the landed clickstream and orders, their checks,
job, automation and range backfills, built on the public surface of
:mod:`orchestration.platform` only, as a team's own pipeline would be."""
