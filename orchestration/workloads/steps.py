"""One workload's step of a discovery tick: spec change, observe, liveness, settle, stop,
launch (in that order; :mod:`orchestration.workloads.decisions` describes each and calls a
:class:`WorkloadStep` per workload), and :class:`TickOutput`, what the steps of a tick add up to.
Pure like the decision function: it reads runs and state and returns new state.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Protocol

from dagster import DagsterRunStatus

from orchestration.workloads.discovery_model import (
    FINISHED,
    Abandon,
    Cancel,
    LastRun,
    Launch,
    Message,
    RestartPolicy,
    RunInfo,
    StopReason,
    WorkloadState,
)
from orchestration.workloads.names import unit_workload
from orchestration.workloads.registry import InvalidSpec

FINISHED_VALUES = frozenset(status.value for status in FINISHED)
WAITING = frozenset(
    {DagsterRunStatus.QUEUED, DagsterRunStatus.NOT_STARTED, DagsterRunStatus.STARTING}
)


class TickOutput:
    """What a tick produces, gathered across workloads."""

    def __init__(self) -> None:
        self.launches: list[Launch] = []
        self.cancels: list[Cancel] = []
        self.abandons: list[Abandon] = []
        self.messages: list[Message] = []
        self.phases: dict[str, list[str]] = {}
        self.crash_looping: list[str] = []

    def info(self, text: str) -> None:
        self.messages.append(Message("info", text))

    def warning(self, text: str) -> None:
        self.messages.append(Message("warning", text))

    def error(self, text: str) -> None:
        self.messages.append(Message("error", text))

    def summary(self, invalid: int) -> str:
        parts = [f"{len(names)} {phase}" for phase, names in sorted(self.phases.items())]
        text = "workloads: " + (", ".join(parts) or "none")
        if self.crash_looping:
            text += "; CRASH-LOOPING: " + ", ".join(self.crash_looping)
        if invalid:
            text += f"; {invalid} invalid spec file(s), see the tick log"
        return text


class Declared(Protocol):
    """What a step needs of what it runs: a workload's spec
    (:class:`~orchestration.workloads.registry.RegisteredWorkload`), or a
    host (:mod:`orchestration.workloads.hosts`)."""

    @property
    def hash(self) -> str: ...
    @property
    def file(self) -> str: ...
    @property
    def enabled(self) -> bool: ...


class WorkloadStep:
    """One workload's step of a tick (the order is in :mod:`orchestration.workloads.decisions`).

    Works on mutable copies of the :class:`WorkloadState` fields; :meth:`run` returns the new
    state and adds launches, stops and messages to ``out``.
    """

    def __init__(
        self,
        name: str,
        entry: Declared | None,
        held: InvalidSpec | None,
        ws: WorkloadState,
        policy: RestartPolicy,
        now: float,
        out: TickOutput,
        rewinding: bool = False,
        surplus: bool = False,
        hold_surplus: bool = False,
    ) -> None:
        """``name``: the replica (:func:`~orchestration.workloads.names.replica_unit`)."""
        self.name, self.entry, self.held, self.ws = name, entry, held, ws
        self.workload, self.replica = unit_workload(name)
        #: A replica beyond the workload's count (scaled down): stopped, never launched; while
        #: ``hold_surplus``, its running run waits for its turn to stop (one per workload).
        self.surplus, self.hold_surplus = surplus, hold_surplus
        #: A rewind of this workload runs: nothing is launched until it ends.
        self.rewinding = rewinding
        self.policy, self.now, self.out = policy, now, out
        self.generation, self.pending, self.pending_since = (
            ws.generation,
            ws.pending,
            ws.pending_since,
        )
        self.crashes = tuple(t for t in ws.crashes if now - t < policy.crash_window)
        self.next_start, self.stopped = ws.next_start, ws.stopped_by_user
        self.canceling = set(ws.canceling)
        self.last = ws.last
        #: Set by :meth:`run`: removed, nothing left running, so the state can go.
        self.gone = False

    def run(self, runs: Sequence[RunInfo]) -> WorkloadState:
        """``runs``: this workload's runs seen this tick, sorted by storage id."""
        ws = self.ws
        self.spec_change(ws.spec_hash)
        self.last = self.observe(ws.last, runs)
        abandoned = self.check_alive(runs)
        self.settle()
        active = [run for run in runs if run.active and run.run_id != abandoned]
        self.canceling &= {run.run_id for run in active}
        self.stop(active)
        phase = self.launch_or_wait(active)
        self.out.phases.setdefault(phase, []).append(self.name)
        self.report_crash_loop()

        entry = self.entry
        self.gone = (
            (entry is None or self.surplus)
            and self.held is None
            and not active
            and self.pending is None
        )
        return WorkloadState(
            generation=self.generation,
            pending=self.pending,
            pending_since=self.pending_since,
            last=self.last,
            spec_hash=entry.hash if entry is not None else ws.spec_hash,
            file=entry.file if entry is not None else ws.file,
            crashes=self.crashes,
            next_start=self.next_start,
            stopped_by_user=self.stopped,
            canceling=tuple(sorted(self.canceling)),
        )

    def obsolete(self, spec_hash: str | None) -> StopReason | None:
        """Why a run serving ``spec_hash`` must not run any more (None: it may)."""
        if self.entry is None:
            return None if self.held is not None else "removed"
        if not self.entry.enabled:
            return "disabled"
        if self.surplus:
            return "scaled_down"
        if spec_hash is not None and spec_hash != self.entry.hash:
            return "spec_changed"
        return None

    def forget_history(self) -> None:
        """Crashes, backoff and a person's stop no longer apply (new spec, or a person acted)."""
        self.crashes, self.next_start, self.stopped = (), None, False

    def spec_change(self, previous: str | None) -> None:
        if self.entry is None or previous == self.entry.hash:
            return
        if previous is None:
            self.out.info(f"{self.name}: workload registered from {self.entry.file}")
        else:
            self.out.info(f"{self.name}: spec changed ({previous} -> {self.entry.hash})")
            self.forget_history()

    def observe(self, last: LastRun | None, runs: Sequence[RunInfo]) -> LastRun | None:
        """``last`` updated from this tick's runs; generation and pending launch caught up."""
        for run in runs:
            if run.by_sensor and run.generation is not None:
                self.generation = max(self.generation, run.generation)
                if self.pending is not None and run.generation >= self.pending:
                    self.pending = self.pending_since = None
        newest = runs[-1] if runs else None
        if newest is not None and (last is None or newest.storage_id > last.storage_id):
            if not newest.by_sensor:
                self.out.info(
                    f"{self.name}: run {newest.run_id} was launched outside the sensor; managing it"
                )
                self.forget_history()
            adopted = self.entry.hash if self.entry is not None else None
            last = LastRun(
                run_id=newest.run_id,
                storage_id=newest.storage_id,
                status=newest.status.value,
                by_sensor=newest.by_sensor,
                spec_hash=newest.spec_hash or adopted,
                stop_reason=newest.stop_reason,
                ended_at=newest.ended_at,
            )
        elif last is not None:
            current = next((run for run in runs if run.run_id == last.run_id), None)
            if current is not None:
                update = {
                    "status": current.status.value,
                    "stop_reason": current.stop_reason,
                    "ended_at": current.ended_at,
                }
                last = last.model_copy(update=update)
            elif last.status not in FINISHED_VALUES:
                self.out.warning(f"{self.name}: run {last.run_id} is gone from run storage")
                last = last.model_copy(update={"status": "DELETED", "settled": True})
        if last is None or last.status != DagsterRunStatus.STARTED.value:
            return last
        if last.started_seen is None:
            return last.model_copy(update={"started_seen": self.now})
        if self.crashes and self.now - last.started_seen >= self.policy.stable_after:
            self.out.info(f"{self.name}: run {last.run_id} has stayed up; crash history cleared")
            self.crashes, self.next_start = (), None
        return last

    def check_alive(self, runs: Sequence[RunInfo]) -> str | None:
        """Abandon ``last`` if its heartbeat stopped changing; return its run id if so."""
        last = self.last
        live = (DagsterRunStatus.STARTED.value, DagsterRunStatus.CANCELING.value)
        if last is None or last.status not in live:
            return None
        current = next((run for run in runs if run.run_id == last.run_id), None)
        beat = current.heartbeat if current is not None else None
        if last.alive_seen is None or (beat is not None and beat != last.heartbeat):
            self.last = last.model_copy(update={"heartbeat": beat, "alive_seen": self.now})
            return None
        silent = self.now - last.alive_seen
        if silent < self.policy.heartbeat_timeout:
            return None
        started = last.status == DagsterRunStatus.STARTED.value
        ended = DagsterRunStatus.FAILURE if started else DagsterRunStatus.CANCELED
        self.out.abandons.append(Abandon(last.run_id, self.name, ended, silent))
        self.out.warning(
            f"{self.name}: run {last.run_id} ({last.status}) has not sent a heartbeat for "
            f"{silent:.0f} s: its worker is gone (killed, out of memory, machine lost); marking "
            f"it {ended.value}"
        )
        self.last = last.model_copy(update={"status": ended.value})
        return last.run_id

    def settle(self) -> None:
        """Handle the end of ``last`` once: a crash, a person's stop, or a stop on purpose."""
        last, name = self.last, self.name
        if last is None or last.settled or last.status not in FINISHED_VALUES:
            return
        self.last = last.model_copy(update={"settled": True})
        if (
            last.run_id in self.canceling
            or last.stop_reason is not None
            or self.obsolete(last.spec_hash) is not None
        ):
            return  # stopped by the sensor or the platform, or it had to stop anyway
        if last.status == DagsterRunStatus.FAILURE.value:
            self.crashes = (*self.crashes, self.now)
            delay = self.policy.delay(len(self.crashes))
            # From the failure, not from this tick (clamped: another machine's clock).
            failed_at = min(self.now, last.ended_at or self.now)
            self.next_start = failed_at + delay
            wait = self.next_start - self.now
            then = (
                (f"restarting in {wait:.0f} s" if wait > 0 else "restarting now")
                + f" ({delay:.0f} s after it failed)"
                if self.entry is not None
                else "not restarted while its spec is invalid"
            )
            self.out.warning(
                f"{name}: run {last.run_id} failed ({len(self.crashes)} crash(es) within "
                f"{self.policy.crash_window:.0f} s); {then}"
            )
            return
        self.stopped = True
        how = f"re-executes run {last.run_id}"
        if self.replica == 0:
            how = f"launches partition {self.workload!r} again (or {how})"
        self.out.warning(
            f"{name}: run {last.run_id} was stopped outside the sensor ({last.status}); it "
            f"stays stopped until someone {how} or its spec changes"
        )

    def stop(self, active: list[RunInfo]) -> None:
        """Stop active runs that must not run; CANCELING ones are never signalled again."""
        for run in active:
            spec = self.last.spec_hash if self.last and run.run_id == self.last.run_id else None
            reason = self.obsolete(spec or run.spec_hash)
            if reason is None and run.run_id != active[-1].run_id:
                reason = "superseded"
            if reason is None or run.status == DagsterRunStatus.CANCELING:
                continue
            waiting = reason == "scaled_down" and self.hold_surplus
            if waiting and run.status == DagsterRunStatus.STARTED:
                continue  # its turn comes once the workload's previous surplus run has ended
            self.out.cancels.append(Cancel(run.run_id, self.name, reason))
            self.canceling.add(run.run_id)
            self.out.info(f"{self.name}: stopping run {run.run_id} ({reason})")

    def launch_or_wait(self, active: list[RunInfo]) -> str:
        """Launch the next generation if nothing stands in the way; return the phase."""
        entry, now = self.entry, self.now
        if self.pending is not None and now - (self.pending_since or now) >= (
            self.policy.launch_timeout
        ):
            self.out.warning(
                f"{self.name}: the run requested as generation {self.pending} has not "
                f"appeared within {self.policy.launch_timeout:.0f} s; requesting the next one"
            )
            self.pending = self.pending_since = None
        if entry is None:
            if self.held is not None:
                return "held (invalid spec)"
            return "stopping" if active else "removed"
        if active:
            if any(
                r.status == DagsterRunStatus.CANCELING or r.run_id in self.canceling for r in active
            ):
                return "stopping"
            return "starting" if all(r.status in WAITING for r in active) else "running"
        if self.surplus:
            return "scaled down"
        if not entry.enabled:
            return "disabled"
        if self.pending is not None:
            return "starting"
        if self.stopped:
            return "stopped by a person"
        if self.rewinding:
            return "rewinding"
        if self.next_start is not None and now < self.next_start:
            return "waiting to restart"
        self.generation += 1
        self.pending, self.pending_since, self.next_start = self.generation, now, None
        restarts = len(self.crashes)
        crash_loop = restarts >= self.policy.crash_loop_threshold
        self.out.launches.append(
            Launch(self.workload, entry.hash, self.generation, restarts, crash_loop, self.replica)
        )
        self.out.info(f"{self.name}: launching generation {self.generation}")
        return "starting"

    def report_crash_loop(self) -> None:
        crashes = len(self.crashes)
        if crashes < self.policy.crash_loop_threshold:
            return
        self.out.crash_looping.append(self.name)
        wait = (self.next_start or self.now) - self.now
        when = f"in {wait:.0f} s" if wait > 0 else "now"
        self.out.warning(
            f"{self.name} is CRASH-LOOPING: {crashes} crashes within "
            f"{self.policy.crash_window:.0f} s; restarts are {self.policy.max_backoff:.0f} s "
            f"apart (next {when}). Fix the spec or handler (a spec change restarts it at once) "
            f"or launch partition {self.workload!r} from the UI to retry now"
        )
