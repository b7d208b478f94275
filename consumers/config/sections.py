"""The sections of a workload spec below its top level: permits, retries, outputs and dead
letters, landing and batching (frozen pydantic models; :mod:`consumers.config.spec` puts them
together and checks what depends on more than one section)."""

from __future__ import annotations

import re
from typing import Annotated, Literal

from pydantic import AfterValidator, Field, model_validator

from consumers.config.loading import Duration, FrozenModel
from consumers.config.names import Name
from consumers.config.sources import SinkProperties

__all__ = [
    "BatchSpec",
    "DeadLetterSpec",
    "LandingSpec",
    "OutputSpec",
    "PermitSpec",
    "RetrySpec",
]


class PermitSpec(FrozenModel):
    """Where the workload takes its permits from and how much of the pool it may claim."""

    pool: Name = "default"
    weight: float = Field(default=1.0, gt=0, allow_inf_nan=False)


#: An output or dead-letter topic; checked against the source's kind by ``WorkloadSpec``.
TopicName = Annotated[str, Field(min_length=1)]


class RetrySpec(FrozenModel):
    """How often a failing record is tried, and how long to wait between attempts."""

    max_attempts: int = Field(default=3, ge=1)
    backoff: Duration = Field(default=0.2, ge=0)
    max_backoff: Duration = Field(default=60.0, ge=0)
    jitter: bool = True


class _Sink(FrozenModel):
    """A topic the workload produces to: on the source's cluster unless it names another one
    (of the same kind), with producer properties over that cluster's."""

    topic: TopicName
    cluster: Name | None = None
    config: SinkProperties = Field(default_factory=dict)


class DeadLetterSpec(_Sink):
    """Where records go after their last attempt, the safety valve, and scheduled replay."""

    max_ratio: float = Field(default=0.2, gt=0, le=1, allow_inf_nan=False)
    window: int = Field(default=1000, ge=1)
    #: Replayed by the ``dead_letter_replay`` schedule (Kafka only) once that is switched on.
    scheduled_replay: bool = False
    #: A dead letter refused for good stops the workload at once; one failing otherwise is sent
    #: again for this long after its first send, then the workload stops.
    write_timeout: Duration = Field(default=300.0, gt=0)
    #: A dead letter replayed this often already is left where it is.
    max_replays: int = Field(default=3, ge=1)

    @model_validator(mode="after")
    def _valve_allows_one(self) -> DeadLetterSpec:
        if self.max_ratio * self.window < 1:
            raise ValueError(
                f"max_ratio x window = {self.max_ratio * self.window:g} allows no dead letter at "
                "all: the first one would stop the workload; raise max_ratio or window"
            )
        return self


class OutputSpec(_Sink):
    """The topic ``Forward`` outcomes are produced to, in source order per partition."""


_DATASET = re.compile(r"[a-z][a-z0-9_]{0,62}")


def is_dataset_name(value: str) -> bool:
    """The one rule for a dataset's name (a lake directory and a Dagster asset key)."""
    return _DATASET.fullmatch(value) is not None


def check_dataset_name(value: str) -> str:
    """``value`` when it is a dataset name, else ``ValueError`` saying the rule."""
    if not is_dataset_name(value):
        raise ValueError(
            f"{value!r} is not allowed: use 1-63 characters of lowercase letters, digits and '_', "
            "starting with a letter (it becomes a directory of the lake and a Dagster asset key)"
        )
    return value


class LandingSpec(FrozenModel):
    """Records land as Parquet under ``<lake>/landed/<dataset>/``; see docs/lake.md."""

    dataset: Annotated[str, AfterValidator(check_dataset_name)]
    flush_rows: int = Field(default=50_000, ge=1)
    flush_interval: Duration = Field(default=60.0, gt=0)
    #: The directory level of a landed file; only the record's UTC day is supported.
    partition_by: Literal["event_date"] = "event_date"
    #: Another enabled workload may land one of these topics into this dataset too: both must
    #: say so, and only from Pulsar (:mod:`consumers.config.overlaps` has the rule and why).
    allow_overlap: bool = False


class BatchSpec(FrozenModel):
    """Batch and unique modes: at most ``size`` records, or what arrived within ``max_wait``."""

    size: int = Field(default=500, ge=1)
    max_wait: Duration = Field(default=2.0, ge=0)
