"""Consumer-run heartbeats: how the discovery sensor tells a live run from a dead one.

Dagster's default run launcher cannot check a run worker's health, so a worker killed outright
(``kill -9``, the kernel's OOM killer, a lost machine) leaves its run STARTED, or CANCELING, for
good, and the sensor would never restart the workload. So every consumer run beats: each
``HEARTBEAT_SECONDS`` it writes ``{"run_id": ..., "beat": n, "at": <epoch s>}`` under
``lanehouse/heartbeat/<replica>`` (the workload's name, or ``<workload>#<i>`` for replica i > 0:
:func:`~orchestration.workloads.names.replica_unit`) in the instance's key-value store (run storage: SQLite or
PostgreSQL, whichever the instance uses). The sensor does not compare clocks: it only notices
whether the beat *changed*, on its own clock, so clock skew between machines cannot declare a run
dead. ``at`` (the worker's clock) is for people: ``lanehouse workloads`` shows its age.

Why the key-value store and not run tags: every tag write bumps the run's ``update_timestamp``,
so every consumer run would look changed on every tick of the sensor's "updated since" query,
and each write rewrites the whole run record.
"""

from __future__ import annotations

import json
import time
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Final

from dagster import DagsterInstance

__all__ = ["HEARTBEAT_SECONDS", "Heartbeat", "heartbeat_key", "read_heartbeats", "write_heartbeat"]

#: Seconds between two beats of a consumer run.
HEARTBEAT_SECONDS: Final = 10.0
_PREFIX: Final = "lanehouse/heartbeat/"


@dataclass(frozen=True)
class Heartbeat:
    #: Changes with every beat: all the sensor compares.
    beat: str
    #: When the worker wrote it, by the worker's clock (epoch seconds).
    at: float | None


def heartbeat_key(unit: str) -> str:
    """The key of one replica's beats (``unit``: :func:`~orchestration.workloads.names.replica_unit`)."""
    return _PREFIX + unit


def write_heartbeat(instance: DagsterInstance, unit: str, run_id: str, beat: int) -> None:
    record = {"run_id": run_id, "beat": beat, "at": round(time.time(), 3)}
    value = json.dumps(record, separators=(",", ":"))
    instance.run_storage.set_cursor_values({heartbeat_key(unit): value})


def read_heartbeats(instance: DagsterInstance, units: Iterable[str]) -> dict[str, Heartbeat]:
    """The latest beat of each run among these replicas' newest runs, by run id.

    One query for all workloads. A value this code cannot read counts as no beat.
    """
    keys = {heartbeat_key(unit) for unit in units}
    if not keys:
        return {}
    beats: dict[str, Heartbeat] = {}
    for value in instance.run_storage.get_cursor_values(keys).values():
        try:
            data = json.loads(value)
            at = data.get("at")
            beats[str(data["run_id"])] = Heartbeat(
                beat=str(data["beat"]), at=float(at) if isinstance(at, int | float) else None
            )
        except (ValueError, KeyError, TypeError, AttributeError):
            continue
    return beats
