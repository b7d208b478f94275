"""Autoscaling a workload's replicas on its lag: :mod:`~consumers.scaling.lag` reads the lag from
the broker, :mod:`~consumers.scaling.policy` turns it into a replica count. The discovery sensor
(``orchestration``) calls both each tick and launches or stops runs."""

from consumers.scaling.lag import Lag, PartitionLag, measure_lag
from consumers.scaling.policy import UP_WAIT, ScaleDecision, ScaleState, next_replicas

__all__ = [
    "UP_WAIT",
    "Lag",
    "PartitionLag",
    "ScaleDecision",
    "ScaleState",
    "measure_lag",
    "next_replicas",
]
