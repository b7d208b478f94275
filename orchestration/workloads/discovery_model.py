"""The discovery sensor's vocabulary: what it remembers, what it sees, what it asks for.

* Memory between ticks, kept in the sensor cursor as JSON (:class:`DiscoveryState`): per
  workload the generation counter behind its run keys, the newest run it knows, crash times and
  the backoff deadline, whether a person stopped it, and the runs the sensor itself asked to
  stop. The cursor is shown on the sensor's page in the UI, so an operator can read it. An
  unreadable cursor raises: starting from nothing would forget which workloads people stopped.
* What it sees: :class:`RunInfo`, one run of the consumer job.
* What it asks for: :class:`Launch` and :class:`Cancel`, with :class:`Message` for the tick log;
  :class:`RestartPolicy` sets the backoff.
"""

from __future__ import annotations

import json
import os
from dataclasses import dataclass
from typing import Literal

from dagster import DagsterRunStatus
from pydantic import Field, ValidationError

from consumers.config.loading import FrozenModel
from consumers.scaling.policy import ScaleState
from orchestration.workloads.heartbeat import HEARTBEAT_SECONDS
from orchestration.workloads.names import (
    GENERATION_TAG,
    REPLICA_TAG,
    SPEC_HASH_TAG,
    WORKLOAD_TAG,
    replica_unit,
)

__all__ = [
    "CRASH_LOOP_TAG",
    "CURSOR_VERSION",
    "FINISHED",
    "RESTARTS_TAG",
    "Abandon",
    "Cancel",
    "DiscoveryState",
    "LastRun",
    "Launch",
    "Message",
    "RestartPolicy",
    "RunInfo",
    "StopReason",
    "WorkloadState",
    "policy_from_env",
]

#: Bump when the shape changes incompatibly.
CURSOR_VERSION = 1


class LastRun(FrozenModel):
    """The newest run of a workload the sensor has seen (its own or anyone's)."""

    run_id: str
    storage_id: int
    status: str
    by_sensor: bool
    #: The spec the run serves: its tag, or the registry's hash when the sensor first saw it.
    spec_hash: str | None = None
    #: ``STOP_REASON_TAG`` of the run: who stopped it on purpose (the sensor, the platform).
    stop_reason: str | None = None
    #: When (sensor clock) the sensor first saw it STARTED: a run up long enough clears crashes.
    started_seen: float | None = None
    #: Its end was handled (a crash counted, a stop recorded): handle it once only.
    settled: bool = False
    #: Its latest heartbeat, and when (sensor clock) it was last known alive: first seen
    #: unfinished, or its heartbeat changed. Silent for ``heartbeat_timeout``: the worker is gone.
    heartbeat: str | None = None
    alive_seen: float | None = None
    #: When it ended (run storage's clock): a crash's backoff counts from here, not from the
    #: tick that saw it, so a sensor tick late by up to its interval does not add to it.
    ended_at: float | None = None


class WorkloadState(FrozenModel):
    """What the sensor remembers about one workload."""

    #: Generations launched so far; the next run key ends with ``generation + 1``.
    generation: int = Field(default=0, ge=0)
    #: A generation requested but whose run has not been seen yet, and since when.
    pending: int | None = None
    pending_since: float | None = None
    last: LastRun | None = None
    #: The spec hash and file seen on the previous tick (a change resets crashes and stops).
    spec_hash: str | None = None
    file: str | None = None
    #: When runs crashed (sensor clock), within the crash window.
    crashes: tuple[float, ...] = ()
    #: Not before this time: the restart backoff after a crash.
    next_start: float | None = None
    #: A person stopped the last run: nothing starts until they launch it or the spec changes.
    stopped_by_user: bool = False
    #: Runs the sensor asked to stop that have not ended yet.
    canceling: tuple[str, ...] = ()


class DiscoveryState(FrozenModel):
    """The whole cursor."""

    version: int = CURSOR_VERSION
    #: Newest run ``update_timestamp`` seen (run storage clock, epoch seconds).
    watermark: float | None = None
    #: By replica (:func:`~orchestration.workloads.names.replica_unit`): ``orders``,
    #: ``orders#1``, ...
    workloads: dict[str, WorkloadState] = Field(default_factory=dict)
    #: Generations of removed workloads, so a name that comes back never reuses a run key.
    retired: dict[str, int] = Field(default_factory=dict)
    #: Autoscaling's state per autoscaled workload (:mod:`orchestration.workloads.scaling`).
    scale: dict[str, ScaleState] = Field(default_factory=dict)
    #: Host runs' states by host (``host.0``, ...) and where each hosted workload is
    #: (:mod:`orchestration.workloads.hosts`).
    hosts: dict[str, WorkloadState] = Field(default_factory=dict)
    placement: dict[str, str] = Field(default_factory=dict)

    @classmethod
    def from_cursor(cls, cursor: str | None) -> DiscoveryState:
        if not cursor:
            return cls()
        try:
            state = cls.model_validate_json(cursor)
        except ValidationError as exc:
            raise ValueError(
                f"the discovery sensor's cursor is not readable ({exc.error_count()} errors, "
                f"first: {exc.errors(include_url=False)[0]['msg']}); reset it only if you "
                "accept that workloads stopped by people may start again"
            ) from exc
        if state.version != CURSOR_VERSION:
            raise ValueError(
                f"the discovery sensor's cursor has version {state.version}, this code reads "
                f"version {CURSOR_VERSION}"
            )
        return state

    def to_cursor(self) -> str:
        """Compact JSON: defaults left out, the version always in."""
        data = self.model_dump(mode="json", exclude_defaults=True)
        data["version"] = self.version
        return json.dumps(data, sort_keys=True, separators=(",", ":"))


#: Run tags on a restart after crashes: recent crashes, and ``true`` once crash-looping.
RESTARTS_TAG = "lanehouse/restarts"
CRASH_LOOP_TAG = "lanehouse/crash_loop"

FINISHED = frozenset(
    {DagsterRunStatus.SUCCESS, DagsterRunStatus.FAILURE, DagsterRunStatus.CANCELED}
)
StopReason = Literal["removed", "disabled", "spec_changed", "superseded", "rewind", "scaled_down"]


@dataclass(frozen=True)
class RunInfo:
    """One run of the consumer job, as the sensor sees it."""

    run_id: str
    storage_id: int
    workload: str
    status: DagsterRunStatus
    #: Launched by this sensor (generation tag, not a re-execution).
    by_sensor: bool = True
    generation: int | None = None
    spec_hash: str | None = None
    #: ``STOP_REASON_TAG``: set by whoever stopped it on purpose (the sensor, the platform).
    stop_reason: str | None = None
    #: Its latest heartbeat (:mod:`orchestration.workloads.heartbeat`), if it has beaten yet.
    heartbeat: str | None = None
    #: Which replica of the workload it is (``REPLICA_TAG``; 0 for runs launched by hand).
    replica: int = 0
    #: When it ended (run storage's clock, epoch seconds), if it has.
    ended_at: float | None = None

    @property
    def active(self) -> bool:
        """Unfinished, CANCELING included: a replacement must wait until it has ended."""
        return self.status not in FINISHED

    @property
    def unit(self) -> str:
        """The replica it serves (:func:`~orchestration.workloads.names.replica_unit`)."""
        return replica_unit(self.workload, self.replica)


@dataclass(frozen=True)
class RestartPolicy:
    """Restart backoff and crash-loop detection (seconds).

    The n-th crash within ``crash_window`` waits ``base_backoff * 2**(n-1)`` (at most
    ``max_backoff``); from ``crash_loop_threshold`` crashes on the workload is crash-looping and
    waits ``max_backoff`` each time. A run up for ``stable_after`` clears the crash history.
    """

    base_backoff: float = 5.0
    max_backoff: float = 300.0
    crash_loop_threshold: int = 5
    crash_window: float = 3600.0
    stable_after: float = 600.0
    #: A requested run not seen after this long is requested again with the next generation.
    launch_timeout: float = 120.0
    #: A STARTED or CANCELING run whose heartbeat has not changed for this long is gone (killed
    #: outright): it is marked FAILURE (restarted with backoff) or CANCELED.
    heartbeat_timeout: float = 120.0

    def __post_init__(self) -> None:
        if not 0 < self.base_backoff <= self.max_backoff:
            raise ValueError("RestartPolicy: need 0 < base_backoff <= max_backoff")
        if self.crash_loop_threshold < 1:
            raise ValueError("RestartPolicy: crash_loop_threshold must be at least 1")
        windows = (self.crash_window, self.stable_after, self.launch_timeout)
        if min(*windows, self.heartbeat_timeout) <= 0:
            raise ValueError("RestartPolicy: windows and timeouts must be positive")

    def delay(self, crashes: int) -> float:
        if crashes >= self.crash_loop_threshold:
            return self.max_backoff
        return float(min(self.max_backoff, self.base_backoff * 2 ** max(crashes - 1, 0)))


#: Overrides :attr:`RestartPolicy.heartbeat_timeout` (seconds), e.g. for a slow run storage.
HEARTBEAT_TIMEOUT_ENV = "LANEHOUSE_HEARTBEAT_TIMEOUT"


def policy_from_env() -> RestartPolicy:
    """The default policy, with ``LANEHOUSE_HEARTBEAT_TIMEOUT`` applied (``ValueError`` naming
    the variable when it is not a number of seconds of at least two heartbeats)."""
    raw = os.environ.get(HEARTBEAT_TIMEOUT_ENV)
    if raw is None:
        return RestartPolicy()
    try:
        timeout = float(raw)
    except ValueError:
        timeout = -1.0
    if not timeout >= 2 * HEARTBEAT_SECONDS:
        raise ValueError(
            f"{HEARTBEAT_TIMEOUT_ENV}={raw!r}: expected seconds, at least {2 * HEARTBEAT_SECONDS:g} "
            f"(two heartbeats of {HEARTBEAT_SECONDS:g} s)"
        )
    return RestartPolicy(heartbeat_timeout=timeout)


@dataclass(frozen=True)
class Launch:
    """A run to request for one generation of a workload."""

    workload: str
    spec_hash: str
    generation: int
    restarts: int = 0
    crash_loop: bool = False
    replica: int = 0

    @property
    def run_key(self) -> str:
        """Unique per replica and generation: Dagster never launches a run key twice."""
        return f"{replica_unit(self.workload, self.replica)}:{self.spec_hash}:{self.generation}"

    def tags(self) -> dict[str, str]:
        tags = {
            WORKLOAD_TAG: self.workload,
            SPEC_HASH_TAG: self.spec_hash,
            GENERATION_TAG: str(self.generation),
            REPLICA_TAG: str(self.replica),
        }
        if self.restarts:
            tags[RESTARTS_TAG] = str(self.restarts)
        if self.crash_loop:
            tags[CRASH_LOOP_TAG] = "true"
        return tags


@dataclass(frozen=True)
class Cancel:
    """A run to stop, and why (also written to the run as its stop reason)."""

    run_id: str
    workload: str
    reason: StopReason


@dataclass(frozen=True)
class Abandon:
    """A run whose worker is gone: mark it ended (``FAILURE`` or ``CANCELED``) in storage."""

    run_id: str
    workload: str
    status: DagsterRunStatus
    silent_for: float


@dataclass(frozen=True)
class Message:
    level: Literal["info", "warning", "error"]
    text: str
