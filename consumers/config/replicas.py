"""``replicas`` in a workload spec: how many processes consume it together, fixed or autoscaled.

    replicas: 3                                   # always three
    replicas: {min: 1, max: 4, target_lag: 30s}   # between one and four, by the broker's lag

Every replica is one member of the workload's Kafka consumer group (or one consumer of its
Pulsar subscription), so the broker splits the partitions between them. Under Dagster each
replica is a run of its own (:mod:`orchestration.workloads.decisions`); ``lanehouse consume
--replicas N`` starts N local processes the same way. :func:`replica_problem` is the one rule
for which subscriptions admit more than one consumer.
"""

from __future__ import annotations

from typing import Any

from pydantic import Field, model_validator

from consumers.config.loading import Duration, FrozenModel

__all__ = ["Replicas", "replica_problem"]

#: Not a limit of the engine: a guard against a typo starting hundreds of runs.
MAX_REPLICAS = 64


class Replicas(FrozenModel):
    """Between ``min`` and ``max`` replicas; equal bounds (an integer in YAML) fix the count."""

    min: int = Field(default=1, ge=1, le=MAX_REPLICAS)
    max: int = Field(default=1, ge=1, le=MAX_REPLICAS)
    #: Autoscaling aims to keep the oldest unconsumed record younger than this.
    target_lag: Duration = Field(default=30.0, gt=0)
    #: Autoscaling removes replicas only after the lag stayed below half the target this long.
    cooldown: Duration = Field(default=300.0, ge=0)

    @model_validator(mode="before")
    @classmethod
    def _from_integer(cls, data: Any) -> Any:
        if isinstance(data, bool):
            raise ValueError("expected a number of replicas or {min, max, target_lag, cooldown}")
        if isinstance(data, int):
            if data < 1:
                raise ValueError(
                    f"at least 1 replica is needed (got {data}); to stop a "
                    "workload set enabled: false"
                )
            return {"min": data, "max": data}
        return data

    @model_validator(mode="after")
    def _ordered(self) -> Replicas:
        if self.min > self.max:
            raise ValueError(f"min ({self.min}) is above max ({self.max})")
        return self

    @property
    def autoscaled(self) -> bool:
        return self.min < self.max


def replica_problem(subscription_type: str, ordering: str) -> str | None:
    """Why a Pulsar subscription of this type cannot have several consumers (None: it can).

    Kafka groups always can: the broker gives each partition to one member.
    """
    if subscription_type == "exclusive":
        return (
            "an exclusive Pulsar subscription admits one consumer; use failover or key_shared "
            "to run replicas"
        )
    if subscription_type == "shared" and ordering != "none":
        return (
            "a shared Pulsar subscription splits one key over several consumers, which breaks "
            f"ordering: {ordering}; use key_shared or failover to run replicas"
        )
    return None
