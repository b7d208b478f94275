"""Consumer-run heartbeats: how the discovery sensor tells a live run from a dead one.

Dagster's default run launcher cannot check a run worker's health, so a worker killed outright
(``kill -9``, the kernel's OOM killer, a lost machine) leaves its run STARTED, or CANCELING, for
good, and the sensor would never restart the workload. So every consumer run beats: each
``HEARTBEAT_SECONDS`` it writes ``{"run_id": ..., "beat": n}`` under ``lanehouse/heartbeat/<workload>``
in the instance's key-value store (run storage: SQLite or PostgreSQL, whichever the instance
uses). The sensor does not compare clocks: it only notices whether the beat *changed*, on its
own clock, so clock skew between machines cannot declare a run dead.

Why the key-value store and not run tags: ``add_run_tags`` rewrites the whole run record, and a
heartbeat racing a status change could write an old status back.
"""

from __future__ import annotations

import json
from collections.abc import Iterable
from typing import Final

from dagster import DagsterInstance

__all__ = ["HEARTBEAT_SECONDS", "heartbeat_key", "read_heartbeats", "write_heartbeat"]

#: Seconds between two beats of a consumer run.
HEARTBEAT_SECONDS: Final = 10.0
_PREFIX: Final = "lanehouse/heartbeat/"


def heartbeat_key(workload: str) -> str:
    return _PREFIX + workload


def write_heartbeat(instance: DagsterInstance, workload: str, run_id: str, beat: int) -> None:
    value = json.dumps({"run_id": run_id, "beat": beat}, separators=(",", ":"))
    instance.run_storage.set_cursor_values({heartbeat_key(workload): value})


def read_heartbeats(instance: DagsterInstance, workloads: Iterable[str]) -> dict[str, str]:
    """The latest beat of each run among ``workloads``' newest runs: ``{run_id: beat}``.

    One query for all workloads. A value this code cannot read counts as no beat.
    """
    keys = {heartbeat_key(name) for name in workloads}
    if not keys:
        return {}
    beats: dict[str, str] = {}
    for value in instance.run_storage.get_cursor_values(keys).values():
        try:
            data = json.loads(value)
            beats[str(data["run_id"])] = str(data["beat"])
        except (ValueError, KeyError, TypeError):
            continue
    return beats
