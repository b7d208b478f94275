"""What the discovery sensor decides on a tick, as a pure function of what it sees.

    decide(registry, state, runs, partitions, now, policy, rewinding, wanted) -> Decision

Inputs: the workload registry, the cursor state, the consumer job's runs seen this tick, the
existing ``workloads`` partitions, the time (sensor clock, epoch seconds) and the workloads
whose rewind runs. Outputs: runs to
launch and to stop, partitions to add and delete, the next state and messages for the tick. It
calls nothing; :mod:`orchestration.workloads.discovery` does the Dagster calls.

``runs`` must hold every unfinished run of the consumer job, and the current record of every run
:func:`tracked_run_ids` names (when it still exists); runs updated recently may be added (the
same run seen twice is handled once).

A workload with ``replicas: n`` is n *replicas*, each a run of its own, tagged with its index
(``lanehouse/replica``) and handled on its own: ``clickstream`` is replica 0, ``clickstream#1``
the next (:func:`~orchestration.workloads.names.replica_unit`). Scaling changes no spec hash, so
the replicas that stay are never stopped; missing ones are launched, surplus ones stopped
(``scaled_down``) one at a time, highest first (:func:`_next_to_scale_down` says why). A person's stop of one replica stops that replica only.

Per replica, in order (:class:`orchestration.workloads.steps.WorkloadStep`):

1. **Spec change** (hash differs from the previous tick): forget crashes, backoff and a person's
   stop; the running run is stopped below.
2. **Observe**: the newest run becomes ``last``; a run the sensor did not launch (UI launchpad,
   re-execution) means a person took over: their stop and the crash history are cleared.
3. **Liveness**: ``last`` STARTED or CANCELING whose heartbeat has not changed for
   ``heartbeat_timeout`` (sensor clock) has lost its worker: it is abandoned, i.e. marked
   ``FAILURE`` (STARTED) or ``CANCELED`` (CANCELING) and settled like any run that ended so.
4. **Settle** ``last``'s end once: stopped by the sensor or the platform (``STOP_REASON_TAG``),
   or obsolete anyway -> nothing; ``FAILURE`` -> a crash, restart after a backoff; any other
   end (``SUCCESS``: terminated, drained and committed; ``CANCELED``: stopped at once) ->
   stopped by a person: it stays stopped until they launch it again or the spec changes.
5. **Stop** unfinished runs of removed or disabled workloads, of an older spec, and older
   duplicates. A ``CANCELING`` run is never signalled again and still counts as active.
6. **Launch** when no run is active, the spec is valid and enabled, no launch is pending, no
   person stopped it, no rewind of it runs (``rewinding``) and the backoff has passed. Generation ``n + 1`` gets run key
   ``name:hash:n+1``: Dagster never reuses a run key, so every launch needs a new one.

A workload whose file turns invalid is *held*: its run keeps going on the last valid spec, nothing
is stopped or started for it, its partition stays. Two files landing one topic into one dataset
are both invalid (:attr:`Registry.overlaps`): a running one is held, a new one never starts, and
the tick's summary names both files.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field

from dagster import DagsterRunStatus

from orchestration.workloads.discovery_model import (
    Abandon,
    Cancel,
    DiscoveryState,
    Launch,
    Message,
    RestartPolicy,
    RunInfo,
    WorkloadState,
)
from orchestration.workloads.names import replica_unit, unit_workload
from orchestration.workloads.registry import InvalidSpec, Registry
from orchestration.workloads.steps import FINISHED_VALUES, TickOutput, WorkloadStep

__all__ = ["Decision", "decide", "tracked_run_ids"]


@dataclass(frozen=True)
class Decision:
    launches: tuple[Launch, ...]
    cancels: tuple[Cancel, ...]
    abandons: tuple[Abandon, ...]
    add_partitions: tuple[str, ...]
    delete_partitions: tuple[str, ...]
    state: DiscoveryState
    messages: tuple[Message, ...]
    #: One line for the tick: workloads by phase, crash-looping ones, invalid files, and the
    #: files refused for landing one topic twice.
    summary: str
    #: Each replica's phase (``running``, ``stopped by a person``, ...; ``crash-looping``
    #: wins), by :func:`~orchestration.workloads.names.replica_unit` name.
    phases: Mapping[str, str] = field(default_factory=dict)


def tracked_run_ids(state: DiscoveryState) -> set[str]:
    """Runs the state believes unfinished: the sensor must report them even if not updated."""
    ids: set[str] = set()
    for ws in state.workloads.values():
        ids.update(ws.canceling)
        if ws.last is not None and ws.last.status not in FINISHED_VALUES:
            ids.add(ws.last.run_id)
    return ids


def decide(
    registry: Registry,
    state: DiscoveryState,
    runs: Iterable[RunInfo],
    partitions: Iterable[str],
    now: float,
    policy: RestartPolicy | None = None,
    rewinding: frozenset[str] = frozenset(),
    wanted: Mapping[str, int] | None = None,
) -> Decision:
    """``wanted``: replicas per workload where not its spec's ``replicas.min`` (autoscaling)."""
    policy = policy or RestartPolicy()
    wanted = wanted or {}
    by_unit: dict[str, dict[str, RunInfo]] = {}
    for run in runs:
        by_unit.setdefault(run.unit, {})[run.run_id] = run
    held = _held(registry, state)
    counts = {  # a disabled workload is one entry (its replicas are stopped all the same)
        name: wanted.get(name, entry.spec.replicas.min) if entry.spec.enabled else 1
        for name, entry in registry.workloads.items()
    }
    next_down = _next_to_scale_down(by_unit, counts, now)
    units = (
        {replica_unit(name, i) for name, count in counts.items() for i in range(count)}
        | state.workloads.keys()
        | {unit for unit, rs in by_unit.items() if any(r.active for r in rs.values())}
    )
    out = TickOutput()
    workloads: dict[str, WorkloadState] = {}
    retired = dict(state.retired)
    for unit in sorted(units, key=unit_workload):
        name, replica = unit_workload(unit)
        if unit in state.workloads:
            ws = state.workloads[unit]
        else:
            ws = WorkloadState(generation=retired.pop(unit, 0))
        runs_of = sorted(by_unit.get(unit, {}).values(), key=lambda r: r.storage_id)
        entry = registry.workloads.get(name)
        step = WorkloadStep(
            unit,
            entry,
            held.get(name),
            ws,
            policy,
            now,
            out,
            rewinding=name in rewinding,
            surplus=entry is not None and replica >= counts[name],
            hold_surplus=next_down.get(name) != replica,
        )
        new = step.run(runs_of)
        if not step.gone:
            workloads[unit] = new
        elif new.generation:
            retired[unit] = new.generation
    for invalid in registry.invalid:
        out.error(f"invalid spec {invalid}")
    existing = set(partitions)
    keep = registry.workloads.keys() | held.keys() | {unit_workload(u)[0] for u in workloads}
    return Decision(
        launches=tuple(out.launches),
        cancels=tuple(out.cancels),
        abandons=tuple(out.abandons),
        add_partitions=tuple(sorted(registry.workloads.keys() - existing)),
        delete_partitions=tuple(sorted(existing - keep)),
        state=state.model_copy(update={"workloads": workloads, "retired": retired}),
        messages=tuple(out.messages),
        summary=_with_overlaps(out.summary(len(registry.invalid)), registry),
        phases={
            **{unit: phase for phase, units in out.phases.items() for unit in units},
            **dict.fromkeys(out.crash_looping, "crash-looping"),
        },
    )


#: After a run of a workload ended, its next surplus replica waits this long (seconds) to stop.
SCALE_DOWN_SETTLE = 15.0


def _next_to_scale_down(
    by_unit: Mapping[str, Mapping[str, RunInfo]], counts: Mapping[str, int], now: float
) -> dict[str, int]:
    """Per workload, the one surplus replica whose running run may be stopped this tick: the
    highest, none while a run of the workload is stopping, and none within
    :data:`SCALE_DOWN_SETTLE` of one ending.

    One at a time, once the group has settled, because each member that leaves a consumer group
    starts a rebalance, and a member leaving during one can leave the others without
    partitions: on Tansu they stayed unassigned for good (plain clients, 2 of 3 members leaving
    0.3 s apart; also one leaving just as the previous rebalance completed). Kafka handles it;
    the cost is one rebalance per leave, which happens anyway.
    """
    busy: set[str] = set()
    highest: dict[str, int] = {}
    for unit, runs in by_unit.items():
        name, replica = unit_workload(unit)
        for run in runs.values():
            ended = run.ended_at
            if run.status == DagsterRunStatus.CANCELING or (
                ended is not None and now - ended < SCALE_DOWN_SETTLE
            ):
                busy.add(name)
        started = any(r.status == DagsterRunStatus.STARTED for r in runs.values())
        if name in counts and replica >= counts[name] and started:
            highest[name] = max(highest.get(name, replica), replica)
    return {name: replica for name, replica in highest.items() if name not in busy}


def _with_overlaps(summary: str, registry: Registry) -> str:
    """Name both files of each overlap in the skip reason, not only in the tick log: a copied
    file is the usual cause, and the person who copied it looks at the sensor's page."""
    if not registry.overlaps:
        return summary
    return f"{summary}; REFUSED, a topic landed twice: " + "; ".join(map(str, registry.overlaps))


def _held(registry: Registry, state: DiscoveryState) -> dict[str, InvalidSpec]:
    """Workloads whose spec file is invalid now: by the name it declares or the file it had."""
    name_of_file = {
        ws.file: unit_workload(unit)[0] for unit, ws in state.workloads.items() if ws.file
    }
    held: dict[str, InvalidSpec] = {}
    for invalid in registry.invalid:
        for name in (invalid.name, name_of_file.get(invalid.file)):
            if name is not None and name not in registry.workloads:
                held.setdefault(name, invalid)
    return held
