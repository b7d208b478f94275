"""Host runs in the discovery sensor's tick: which workloads share them, and which host runs to
launch, stop or declare dead. Pure functions; :mod:`orchestration.workloads.discovery` gathers
their inputs and applies their outputs.

    plan_hosts(registry, placement, budget, rewinding) -> HostPlan
    decide_hosts(members, states, runs, now, policy) -> HostDecision

A workload is hosted when host runs are on (a budget above 0), it is enabled, it needs no run of
its own (:func:`~orchestration.workloads.placement.own_run_reason`) and no rewind of it runs (a
rewind needs its group empty: the host drops it meanwhile). Its own consumer runs then get a
wanted count of 0, so the sensor stops the one it had, and the host it is placed on starts it.

A host is run exactly as one replica of a workload is
(:class:`~orchestration.workloads.steps.WorkloadStep`): launched with a generation, restarted
after a crash with backoff, declared dead when its heartbeat stops, left stopped when a person
terminates it (the host's stop; its workloads stop with it), stopped once it has no members.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Final

from orchestration.workloads.discovery_model import (
    Abandon,
    Cancel,
    Launch,
    Message,
    RestartPolicy,
    RunInfo,
    WorkloadState,
)
from orchestration.workloads.placement import own_run_reason, place
from orchestration.workloads.registry import Registry
from orchestration.workloads.steps import TickOutput, WorkloadStep

__all__ = ["HOST_VERSION", "HostDecision", "HostPlan", "decide_hosts", "plan_hosts"]

#: Stands for a host's spec hash in its run key and tags; a new value restarts every host.
HOST_VERSION: Final = "host-v1"


@dataclass(frozen=True)
class _Host:
    """A host as the step sees a declared thing."""

    hash: str = HOST_VERSION
    file: str = "the sensor's placement"
    enabled: bool = True


@dataclass(frozen=True)
class HostPlan:
    #: workload -> host, for every hosted workload.
    placement: dict[str, str] = field(default_factory=dict)
    #: host -> {workload: spec hash}; a host left empty this tick maps to ``{}``.
    members: dict[str, dict[str, str]] = field(default_factory=dict)
    #: Workloads whose own consumer runs must be 0 (hosted, or waiting for their rewind).
    without_own_run: frozenset[str] = frozenset()


def plan_hosts(
    registry: Registry, placement: Mapping[str, str], budget: int, rewinding: frozenset[str]
) -> HostPlan:
    """Place the hostable workloads, keeping ``placement`` (the previous tick's) where it can."""
    if budget < 1:
        return HostPlan(members={host: {} for host in set(placement.values())})
    hostable = {
        name: entry.hash
        for name, entry in registry.workloads.items()
        if entry.spec.enabled and own_run_reason(entry.spec) is None
    }
    hosted = {name: h for name, h in hostable.items() if name not in rewinding}
    placed = place(hosted, placement, budget)
    members: dict[str, dict[str, str]] = {host: {} for host in set(placement.values())}
    for name, host in sorted(placed.items()):
        members.setdefault(host, {})[name] = hosted[name]
    return HostPlan(placed, members, frozenset(hostable))


@dataclass(frozen=True)
class HostDecision:
    launches: tuple[Launch, ...]
    cancels: tuple[Cancel, ...]
    abandons: tuple[Abandon, ...]
    #: Every host's state, kept once seen: a host that comes back never reuses a run key.
    states: dict[str, WorkloadState]
    messages: tuple[Message, ...]
    #: Each host's phase (``running``, ``stopped by a person``, ...).
    phases: dict[str, str]


def decide_hosts(
    members: Mapping[str, Mapping[str, str]],
    states: Mapping[str, WorkloadState],
    runs: Iterable[RunInfo],
    now: float,
    policy: RestartPolicy,
) -> HostDecision:
    """``runs``: every unfinished host run and the current record of each host's last run."""
    by_host: dict[str, dict[str, RunInfo]] = {}
    for run in runs:
        by_host.setdefault(run.workload, {})[run.run_id] = run
    wanted = {host for host, on_it in members.items() if on_it}
    active = {host for host, rs in by_host.items() if any(r.active for r in rs.values())}
    out = TickOutput()
    new: dict[str, WorkloadState] = {}
    for host in sorted(wanted | states.keys() | active):
        step = WorkloadStep(
            host,
            _Host() if host in wanted else None,
            None,
            states.get(host, WorkloadState()),
            policy,
            now,
            out,
        )
        new[host] = step.run(sorted(by_host.get(host, {}).values(), key=lambda r: r.storage_id))
    phases = {host: phase for phase, hosts in out.phases.items() for host in hosts}
    return HostDecision(
        launches=tuple(out.launches),
        cancels=tuple(out.cancels),
        abandons=tuple(out.abandons),
        states=new,
        messages=tuple(out.messages),
        phases={**phases, **dict.fromkeys(out.crash_looping, "crash-looping")},
    )
