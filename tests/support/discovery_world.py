"""A small model of run storage for the discovery sensor's decisions, tick by tick.

``World`` applies each :class:`Decision` the way Dagster would (a launch creates a run unless
its run key was used before, a stop makes the run CANCELING) and lets the test move runs and
time, so every scenario is a few explicit ticks with no Dagster instance.
"""

from __future__ import annotations

import itertools
from dataclasses import replace
from typing import Any

from dagster import DagsterRunStatus

from consumers import WorkloadSpec
from consumers.config.spec import spec_hash
from orchestration.workloads.decisions import Decision, decide
from orchestration.workloads.discovery_model import (
    DiscoveryState,
    Launch,
    RestartPolicy,
    RunInfo,
)
from orchestration.workloads.registry import InvalidSpec, RegisteredWorkload, Registry

S = DagsterRunStatus
POLICY = RestartPolicy(
    base_backoff=5, max_backoff=300, crash_loop_threshold=4, crash_window=3600, stable_after=600
)


def workload(name: str, **fields: Any) -> RegisteredWorkload:
    spec = WorkloadSpec.model_validate(
        {
            "name": name,
            "source": {"kind": "kafka", "bootstrap_servers": "k:9092", "topics": [f"{name}-in"]},
            "handler": "consumers.dev.examples:enrich",
            **fields,
        }
    )
    return RegisteredWorkload(spec, spec_hash(spec), f"/specs/{name}.yaml")


def registry(*workloads: RegisteredWorkload, invalid: tuple[InvalidSpec, ...] = ()) -> Registry:
    return Registry({w.name: w for w in workloads}, invalid)


class World:
    """Run storage, partitions and a clock, changed only by decisions and by the test."""

    def __init__(self, policy: RestartPolicy = POLICY) -> None:
        self.policy = policy
        self.runs: dict[str, RunInfo] = {}
        self.partitions: set[str] = set()
        self.state = DiscoveryState()
        self.now = 1_000_000.0
        self.used_keys: set[str] = set()
        self.requested: list[Launch] = []
        #: Runs whose worker is gone: they stop beating.
        self.dead: set[str] = set()
        self._ids = itertools.count(1)
        self._beats = itertools.count(1)

    def tick(
        self,
        reg: Registry,
        rewinding: frozenset[str] = frozenset(),
        wanted: dict[str, int] | None = None,
    ) -> Decision:
        for run in list(self.runs.values()):
            if run.status in (S.STARTED, S.CANCELING) and run.run_id not in self.dead:
                self.runs[run.run_id] = replace(run, heartbeat=str(next(self._beats)))
        decision = decide(
            reg,
            self.state,
            self.runs.values(),
            self.partitions,
            self.now,
            self.policy,
            rewinding,
            wanted,
        )
        self.state = DiscoveryState.from_cursor(decision.state.to_cursor())  # round trip
        self.partitions |= set(decision.add_partitions)
        self.partitions -= set(decision.delete_partitions)
        for launch in decision.launches:
            self.requested.append(launch)
            if launch.run_key not in self.used_keys:  # Dagster skips a used run key
                self.used_keys.add(launch.run_key)
                self.add_run(
                    launch.workload,
                    S.QUEUED,
                    True,
                    launch.generation,
                    launch.spec_hash,
                    launch.replica,
                )
        for abandon in decision.abandons:
            self.set(abandon.run_id, abandon.status, self.runs[abandon.run_id].stop_reason)
        for cancel in decision.cancels:
            run = self.runs[cancel.run_id]
            status = S.CANCELED if run.status == S.QUEUED else S.CANCELING
            self.runs[cancel.run_id] = replace(run, status=status, stop_reason=cancel.reason)
        return decision

    def add_run(
        self,
        name: str,
        status: DagsterRunStatus = S.STARTED,
        by_sensor: bool = False,
        generation: int | None = None,
        spec: str | None = None,
        replica: int = 0,
    ) -> str:
        number = next(self._ids)
        run_id = f"run-{number}"
        self.runs[run_id] = RunInfo(
            run_id, number, name, status, by_sensor, generation, spec, replica=replica
        )
        return run_id

    def set(self, run_id: str, status: DagsterRunStatus, stop_reason: str | None = None) -> None:
        ended = self.now if status in (S.SUCCESS, S.FAILURE, S.CANCELED) else None
        run = replace(self.runs[run_id], status=status, stop_reason=stop_reason, ended_at=ended)
        self.runs[run_id] = run

    def latest(self, name: str) -> RunInfo:
        return max(
            (r for r in self.runs.values() if r.workload == name), key=lambda r: r.storage_id
        )

    def active(self, name: str) -> list[RunInfo]:
        return [r for r in self.runs.values() if r.workload == name and r.active]

    def running(self, reg: Registry, name: str = "orders") -> str:
        """Launch ``name`` and let its run start; its run id."""
        self.tick(reg)
        self.start_all()
        self.tick(reg)
        return self.latest(name).run_id

    def start_all(self) -> None:
        for run in list(self.runs.values()):
            if run.status in (S.QUEUED, S.STARTING):
                self.set(run.run_id, S.STARTED)


def texts(decision: Decision, level: str | None = None) -> str:
    return "\n".join(m.text for m in decision.messages if level in (None, m.level))
