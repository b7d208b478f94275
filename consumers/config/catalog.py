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

__all__ = ["CATALOG_FIELDS", "ChecksSpec", "Owner", "TagKey", "TagValue"]

#: The spec fields this module adds; left out of the spec's hash.
CATALOG_FIELDS: Final = ("owners", "tags", "checks")

# The forms Dagster accepts for an asset's owners and tags (its ``is_valid_email``, tag key and
# strict tag value patterns): a spec that passes here never makes the code location fail to load.
_EMAIL = re.compile(r"[A-Za-z0-9._%+-]+@[A-Za-z0-9.-]+\.[A-Za-z]{2,7}")
_TEAM = re.compile(r"team:[A-Za-z0-9_-]{1,63}")
_TAG_KEY = re.compile(r"[A-Za-z0-9_.-]{1,63}")
_TAG_VALUE = re.compile(r"[A-Za-z0-9_.-]{0,63}")


def _check_owner(value: str) -> str:
    if not (_EMAIL.fullmatch(value) or _TEAM.fullmatch(value)):
        raise ValueError(
            f"{value!r} is not an owner: use an email address or 'team:<name>' (letters, digits, "
            "'_' and '-')"
        )
    return value


def _tag_check(pattern: re.Pattern[str], what: str) -> AfterValidator:
    def check(value: str) -> str:
        if not pattern.fullmatch(value):
            raise ValueError(
                f"{value!r} is not allowed as a tag {what}: use {'1' if what == 'key' else '0'}"
                "-63 letters, digits, '_', '.' and '-'"
            )
        return value

    return AfterValidator(check)


Owner = Annotated[str, AfterValidator(_check_owner)]
TagKey = Annotated[str, _tag_check(_TAG_KEY, "key")]
TagValue = Annotated[str, _tag_check(_TAG_VALUE, "value")]


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
