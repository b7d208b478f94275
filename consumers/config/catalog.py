"""How a workload shows in a catalog: its owners and tags, and the thresholds its checks hold it
to (Dagster's asset checks on the workload's asset; docs/operations.md#checks).

None of it changes what the engine does, so none of it is part of the spec's hash: editing an
owner or a threshold restarts no run.
"""

from __future__ import annotations

import re
from typing import Annotated, Final

from pydantic import AfterValidator, Field

from consumers.config.loading import Duration, FrozenModel

__all__ = ["CATALOG_FIELDS", "ChecksSpec", "Owner", "TagValue"]

#: The spec fields this module adds; left out of the spec's hash.
CATALOG_FIELDS: Final = ("owners", "tags", "checks")

_EMAIL = re.compile(r"[^@\s]+@[^@\s]+\.[^@\s]+")
_TEAM = re.compile(r"team:[A-Za-z0-9_-]{1,63}")
_TAG = re.compile(r"[A-Za-z0-9_.-]{0,63}")


def _check_owner(value: str) -> str:
    if not (_EMAIL.fullmatch(value) or _TEAM.fullmatch(value)):
        raise ValueError(
            f"{value!r} is not an owner: use an email address or 'team:<name>' (letters, digits, "
            "'_' and '-')"
        )
    return value


def _check_tag(value: str) -> str:
    if not _TAG.fullmatch(value):
        raise ValueError(
            f"{value!r} is not allowed in a tag: use at most 63 letters, digits, '_', '.' and '-'"
        )
    return value


Owner = Annotated[str, AfterValidator(_check_owner)]
TagValue = Annotated[str, AfterValidator(_check_tag)]


class ChecksSpec(FrozenModel):
    """Thresholds of the workload's checks: each turns red past its threshold."""

    #: Records behind the committed positions, summed over the workload's partitions.
    lag: int = Field(default=10_000, ge=1)
    #: How long the record at a partition's commit position may hold it (a stuck handler, a
    #: parked record, acknowledgements that never come).
    pinned: Duration = Field(default=300.0, gt=0)
    #: The share of the dead-letter safety valve used (dead letters among the last ``window``
    #: records against ``max_ratio x window``); at 1 the valve stops the workload.
    dead_letters: float = Field(default=0.5, gt=0, le=1, allow_inf_nan=False)
