"""What the discovery sensor and the host runs tell each other, in the instance's key-value store
(run storage: SQLite or PostgreSQL, as heartbeats are, for the same reason: no run-record churn).

    lanehouse/host/<host>        the sensor writes: the host's members, {workload: spec hash}
    lanehouse/hosted/<workload>  the host run writes: how the workload fares in it
    lanehouse/stopped/<workload> a person's stop (the stop_workload and start_workload jobs)

A host run reads its members every few seconds and makes its engine match them; a member's spec
hash changing restarts that member alone. A value this code cannot read counts as absent.
"""

from __future__ import annotations

import time
from collections.abc import Iterable, Mapping
from typing import Final, Literal, TypeVar

from dagster import DagsterInstance
from pydantic import BaseModel, ConfigDict, ValidationError

__all__ = [
    "MemberStatus",
    "read_members",
    "read_statuses",
    "read_stopped",
    "write_members",
    "write_status",
    "write_stopped",
]

_MEMBERS: Final = "lanehouse/host/"
_STATUS: Final = "lanehouse/hosted/"
_STOPPED: Final = "lanehouse/stopped/"
_Model = TypeVar("_Model", bound=BaseModel)


class _Members(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid")

    members: dict[str, str]


MemberState = Literal["running", "waiting", "stopped"]


class MemberStatus(BaseModel):
    """One workload in a host run: running, waiting to start again after a failure, or stopped."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    host: str
    run_id: str
    state: MemberState
    #: Why it is waiting (its last failure), else None.
    error: str | None = None
    #: Failures since it last ran long enough to count as stable.
    failures: int = 0
    #: Epoch seconds (the host's clock), for people.
    at: float = 0.0


def write_members(instance: DagsterInstance, members: Mapping[str, Mapping[str, str]]) -> None:
    """Every host's members, ``{host: {workload: spec hash}}``, one key per write: Dagster's SQL
    ``set_cursor_values`` inserts all keys, and when one exists only updates the existing ones,
    so a new host written beside an old one in one call would be dropped (Dagster 1.13)."""
    for host, on_it in members.items():
        value = _Members(members=dict(on_it)).model_dump_json()
        instance.run_storage.set_cursor_values({_MEMBERS + host: value})


def read_members(instance: DagsterInstance, host: str) -> dict[str, str] | None:
    """The host's members; None when none were written or the value is unreadable."""
    raw = instance.run_storage.get_cursor_values({_MEMBERS + host}).get(_MEMBERS + host)
    if raw is None:
        return None
    try:
        return dict(_Members.model_validate_json(raw).members)
    except ValidationError:
        return None


def write_status(instance: DagsterInstance, workload: str, status: MemberStatus) -> None:
    stamped = status.model_copy(update={"at": round(time.time(), 3)})
    instance.run_storage.set_cursor_values({_STATUS + workload: stamped.model_dump_json()})


def read_statuses(instance: DagsterInstance, workloads: Iterable[str]) -> dict[str, MemberStatus]:
    return _read(instance, _STATUS, workloads, MemberStatus)


class _Stopped(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid")

    stopped: bool
    #: The run of the job that set it, and when (epoch seconds), for people.
    run_id: str
    at: float


def write_stopped(instance: DagsterInstance, workload: str, stopped: bool, run_id: str) -> None:
    """Mark ``workload`` stopped by a person, or clear the mark (the store keeps every key)."""
    value = _Stopped(stopped=stopped, run_id=run_id, at=round(time.time(), 3))
    instance.run_storage.set_cursor_values({_STOPPED + workload: value.model_dump_json()})


def read_stopped(instance: DagsterInstance, workloads: Iterable[str]) -> frozenset[str]:
    """Which of ``workloads`` a person stopped, in one query."""
    marks = _read(instance, _STOPPED, workloads, _Stopped)
    return frozenset(name for name, mark in marks.items() if mark.stopped)


def _read(
    instance: DagsterInstance, prefix: str, names: Iterable[str], model: type[_Model]
) -> dict[str, _Model]:
    """The values under ``prefix + name`` in one query, by name; unreadable ones left out."""
    keys = {prefix + name for name in names}
    if not keys:
        return {}
    found = {}
    for key, raw in instance.run_storage.get_cursor_values(keys).items():
        try:
            found[key.removeprefix(prefix)] = model.model_validate_json(raw)
        except ValidationError:
            continue
    return found
