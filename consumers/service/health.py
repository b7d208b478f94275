"""``/healthz``'s answer: whether every workload of a process is ready (see :func:`health`).

Pure over the app's runners and a small dict the caller keeps between probes; the HTTP server
(:mod:`consumers.service.http`) serves it.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from consumers.engine.runner import WorkloadRunner
    from consumers.service.app import ConsumerApp

__all__ = ["DEFAULT_STALL_SECONDS", "Health", "health"]

DEFAULT_STALL_SECONDS = 30.0


@dataclass
class Health:
    ok: bool
    workloads: dict[str, dict[str, Any]] = field(default_factory=dict)

    def body(self) -> dict[str, Any]:
        return {"status": "ok" if self.ok else "unavailable", "workloads": self.workloads}


def health(
    app: ConsumerApp,
    last_progress: dict[str, tuple[int, float]],
    now: float,
    stall_seconds: float = DEFAULT_STALL_SECONDS,
) -> Health:
    """Whether every workload is ready: assigned at least one partition and not stuck.

    Stuck means work is waiting (``runner.busy``) and ``counters.completed`` has not moved for
    ``stall_seconds``. ``last_progress`` maps a busy workload to ``(completed, since)``: the
    caller keeps it between probes, and it is the only state this updates. Probes only sample,
    so the stall clock starts at the first probe that sees work waiting with no completion
    since the one before: a stall is reported late by up to one probe interval, never early.
    """
    result = Health(ok=True)
    runners = dict(app.runners)
    for name in [w.settings.name for w in app.workloads]:
        runner = runners.get(name)
        if runner is None:
            result.ok = False
            result.workloads[name] = {"ready": False, "reason": "not started"}
            continue
        completed = runner.counters.completed
        partitions = len(runner.parts)
        busy = _busy(runner)
        seen = last_progress.get(name)
        if not busy:  # nothing waiting: no stall, and the clock restarts when work arrives
            last_progress.pop(name, None)
            since = now
        elif seen is None or seen[0] != completed:
            last_progress[name] = (completed, now)
            since = now
        else:
            since = seen[1]
        reason = None
        if not partitions:
            reason = "not assigned"
        elif now - since >= stall_seconds:
            reason = f"no progress for {now - since:.0f} s"
        result.ok = result.ok and reason is None
        result.workloads[name] = {
            "ready": reason is None,
            "reason": reason,
            "partitions": partitions,
            "completed": completed,
            "busy": busy,
        }
    if not result.workloads:
        result.ok = False
    return result


def _busy(runner: WorkloadRunner) -> bool:
    """Read from a server thread: a read racing a rebalance retries once."""
    try:
        return runner.busy
    except RuntimeError:  # the partitions dict changed size while we iterated it
        return runner.busy
