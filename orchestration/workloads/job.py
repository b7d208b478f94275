"""The consumer job: one Dagster run per workload replica (partition key = workload name) that
runs the engine until the run is terminated, for a workload with a process of its own (the
others share host runs: :mod:`orchestration.workloads.host_job`).

    launch ─► find the workload's spec in workloads_dir() ─► engine on an asyncio loop in the
           op's thread, one AssetObservation per source topic every ``observe_every_seconds``
    terminate (CANCELING + SIGINT) ─► drain (at most the spec's drain_timeout) ─► final commit
           ─► final observation ─► the op returns ─► run SUCCESS, no error event

Termination. Dagster terminates a run by marking it CANCELING and sending one SIGINT; nothing
follows, and the run stays CANCELING until the op returns. While the engine runs the op owns
SIGINT and SIGTERM (the previous handlers come back afterwards), and reads the run's status
every ``STATUS_POLL_SECONDS``. The first signal, or the CANCELING status, asks for a graceful
stop; a second signal, or the UI's force termination (status CANCELED), cancels the handler
calls still running, so the drain ends at once (the final commit still covers completed records
only). The engine's own signal handling is not used: it calls ``os._exit`` on the second
signal, which would leave the run CANCELING for good.

How a stopped run ends. A terminate (a person's in the UI, the sensor's, ``lanehouse up``'s)
that drained and committed is a clean stop: the op returns and the run ends SUCCESS. Dagster
records any interrupt raised in a step as a ``STEP_FAILURE`` with a stack trace, so raising would
show every clean stop as an error. Who stopped it is the ``lanehouse/stop_reason`` tag (the
sensor's and the platform's stops) or its absence (a person's: the sensor keeps it stopped).
Every other stop still raises ``DagsterExecutionInterruptedError``, so Dagster decides as it
does under the multiprocess executor: a stop made immediate (a second signal, a force
termination) ends CANCELED, and a signal Dagster did not send (a container stopped or evicted)
or a run the sensor declared dead ends FAILURE, which the sensor restarts.

Liveness. The op writes a heartbeat every ``HEARTBEAT_SECONDS`` (:mod:`orchestration.workloads.heartbeat`);
the discovery sensor marks a run whose heartbeat stops as ended, so a worker killed outright is
restarted. A run that finds itself marked ended while still running stops gracefully.

Threads. The in-process executor runs the step inline on the thread that runs the job: the run
worker's main thread (``dagster api execute_run``), or whoever calls ``execute_in_process``.
Python allows signal handlers on the main thread only; elsewhere the status poll is the only
termination notice. Everything that talks to Dagster (logs, observations) happens on the op's
thread: the engine's loop runs there, and so does the reporting task
(:mod:`orchestration.workloads.reporting`).
"""

# No ``from __future__ import annotations``: Dagster reads the op's ``config`` annotation at
# definition time and cannot resolve it from a string.
import asyncio
import os
import signal
import threading
from collections.abc import Iterator
from concurrent.futures import Executor
from contextlib import contextmanager
from types import FrameType
from typing import Final

from dagster import (
    Config,
    DagsterExecutionInterruptedError,
    DagsterRunStatus,
    Failure,
    OpExecutionContext,
    in_process_executor,
    job,
    op,
)
from pydantic import Field

from consumers import ConsumerApp, WorkloadSummary
from consumers.config.spec import spec_hash
from consumers.engine import event_loop
from consumers.service.launch import build_app
from orchestration import settings
from orchestration.workloads.endpoints import run_endpoints
from orchestration.workloads.finding import find_workload
from orchestration.workloads.heartbeat import HEARTBEAT_SECONDS, write_heartbeat
from orchestration.workloads.names import (
    CONSUMER_JOB_NAME,
    SPEC_HASH_TAG,
    replica_of,
    replica_unit,
    stop_reason_of,
    workloads_dir,
)
from orchestration.workloads.partitions import WORKLOAD_PARTITIONS
from orchestration.workloads.reporting import Reporter

#: Seconds between a run's progress observations unless its run config or this variable says.
OBSERVE_ENV: Final = "LANEHOUSE_OBSERVE_SECONDS"
DEFAULT_OBSERVE_SECONDS: Final = 30.0
#: How often the op reads its run's status (CANCELING: stop; CANCELED: stop at once).
STATUS_POLL_SECONDS = 1.0
#: How often an immediate stop checks whether the drain has begun.
ABORT_POLL_SECONDS: Final = 0.01


class ConsumerRunConfig(Config):
    """Run config of the consumer op: ``{"ops": {"consume": {"config": {...}}}}``."""

    pool_size: int | None = Field(
        default=None, ge=1, description="Permits in the workload's pool (default: the engine's)."
    )
    observe_every_seconds: float | None = Field(
        default=None,
        gt=0,
        description="Seconds between progress observations of each topic (default "
        f"${OBSERVE_ENV}, else {DEFAULT_OBSERVE_SECONDS:g}).",
    )

    def observe_every(self) -> float:
        """The configured interval, else ``LANEHOUSE_OBSERVE_SECONDS``, else 30 s."""
        if self.observe_every_seconds is not None:
            return self.observe_every_seconds
        raw = os.environ.get(OBSERVE_ENV)
        if raw is None:
            return DEFAULT_OBSERVE_SECONDS
        try:
            seconds = float(raw)
        except ValueError:
            seconds = -1.0
        if not 0 < seconds < float("inf"):
            raise Failure(f"{OBSERVE_ENV}={raw!r}: expected a positive number of seconds")
        return seconds


# ---------------------------------------------------------------------------- stopping


class StopRequests:
    """Graceful stop on the first request; immediate on a second signal or a forced termination.

    Signals and the run's status can both announce one termination (Dagster marks the run
    CANCELING, then signals), so only a second *signal* or the CANCELED status escalates.
    Runs on the loop thread only.
    """

    def __init__(self, app: ConsumerApp, context: OpExecutionContext) -> None:
        self._app = app
        self._context = context
        self._signals = 0
        self.requested = False
        self.immediate = False
        self._abort: asyncio.Task[None] | None = None

    def signal(self, name: str) -> None:
        self._signals += 1
        if self._signals == 1:
            self.stop(name)
        else:
            self.abort(f"second {name}")

    def stop(self, reason: str) -> None:
        if not self.requested:
            self.requested = True
            self._context.log.info(
                f"stop requested ({reason}): draining in-flight records, then committing"
            )
            self._app.request_stop()

    def abort(self, reason: str) -> None:
        self.stop(reason)
        if not self.immediate:
            self.immediate = True
            self._context.log.warning(
                f"immediate stop ({reason}): cancelling running handler calls; "
                "only completed records are committed"
            )
            self._abort = asyncio.ensure_future(_abort(self._app))

    def close(self) -> None:
        if self._abort is not None:
            self._abort.cancel()


async def _abort(app: ConsumerApp) -> None:
    """End the drain at once: once no record can start any more, cancel the running ones.

    A runner holding no permit runs nothing, and ``close()`` would unregister it from its pool,
    which ``app.run()`` does once more on its way out: so only busy runners are closed here.
    """
    # The engine signals no event when its drain begins; this wait lasts a few loop turns.
    while not all(runner.stopping for runner in app.runners.values()):  # noqa: ASYNC110
        await asyncio.sleep(ABORT_POLL_SECONDS)
    for runner in app.runners.values():
        if runner.permits_held:
            runner.close()


@contextmanager
def stop_signals(loop: asyncio.AbstractEventLoop, stop: StopRequests) -> Iterator[bool]:
    """Route SIGINT and SIGTERM to ``stop`` while the engine runs, then restore the previous
    handlers (Dagster's). Yields False off the main thread, where Python allows no handler.

    ``signal.signal`` rather than ``loop.add_signal_handler``: removing the latter resets the
    handler to the default first, a window in which a SIGTERM would kill the run worker.
    """
    if threading.current_thread() is not threading.main_thread():
        yield False
        return

    def handle(signum: int, frame: FrameType | None) -> None:
        loop.call_soon_threadsafe(stop.signal, signal.Signals(signum).name)

    previous = {sig: signal.signal(sig, handle) for sig in (signal.SIGINT, signal.SIGTERM)}
    try:
        yield True
    finally:
        for sig, handler in previous.items():
            signal.signal(sig, signal.SIG_DFL if handler is None else handler)


async def watch_run_status(
    context: OpExecutionContext, stop: StopRequests, executor: Executor | None = None
) -> None:
    """Stop when the run is CANCELING, at once when it was force-terminated (CANCELED).

    The only termination notice off the main thread, and a backstop on it: a terminate whose
    signal never arrives (the launcher could not reach the run) still stops the consumer.
    """
    instance, run_id = context.instance, context.run_id
    while not stop.immediate:
        await asyncio.sleep(STATUS_POLL_SECONDS)
        # Off the loop: a slow run storage must not stall handlers. Instances are thread-safe
        # (the daemon shares one across threads).
        try:
            loop = asyncio.get_running_loop()
            run = await loop.run_in_executor(executor, instance.get_run_by_id, run_id)
        except Exception as exc:  # e.g. SQLite busy: a dead watcher would never see a terminate
            context.log.warning(f"run status not read, trying again: {exc!r}")
            continue
        if run is None:
            continue
        if run.status == DagsterRunStatus.CANCELING:
            stop.stop("the run is being terminated")
        elif run.status == DagsterRunStatus.CANCELED:
            stop.abort("the run was force-terminated")
        elif run.status in (DagsterRunStatus.FAILURE, DagsterRunStatus.SUCCESS):
            # The sensor heard no heartbeat and declared this run dead; a replacement may be
            # starting, so this one must not keep consuming.
            stop.stop(f"the run was marked {run.status.value} while still running")


async def beat(context: OpExecutionContext, unit: str, executor: Executor | None = None) -> None:
    """Tell the discovery sensor this run is alive (:mod:`orchestration.workloads.heartbeat`);
    ``unit`` names the workload's replica it serves. ``executor``: where the writes run (default:
    the loop's; a host run gives its own, so reports queued there cannot delay a beat).

    A failed write is logged and retried on the next beat: missing beats for
    ``heartbeat_timeout`` make the sensor declare the run dead, and the run then stops itself.
    """
    instance, run_id = context.instance, context.run_id
    count = 0
    while True:
        count += 1
        try:
            loop = asyncio.get_running_loop()
            await loop.run_in_executor(executor, write_heartbeat, instance, unit, run_id, count)
        except Exception as exc:
            context.log.warning(f"heartbeat {count} not written: {exc!r}")
        await asyncio.sleep(HEARTBEAT_SECONDS)


# ---------------------------------------------------------------------------- the job


async def serve(
    context: OpExecutionContext,
    app: ConsumerApp,
    stop: StopRequests,
    reporter: Reporter,
    every: float,
) -> list[WorkloadSummary]:
    """Run the engine until it stops; observe periodically and once at the end."""
    with stop_signals(asyncio.get_running_loop(), stop) as trapped:
        if not trapped:
            context.log.warning("op off the main thread: no signals; stopping on the run status")
        engine = asyncio.ensure_future(app.run())
        helpers = [
            asyncio.ensure_future(beat(context, replica_unit(reporter.workload, reporter.replica))),
            asyncio.ensure_future(reporter.every(every)),
            asyncio.ensure_future(watch_run_status(context, stop)),
        ]
        status = "failed"
        try:
            summaries = await engine
            status = "stopped"
            return summaries
        finally:
            for task in helpers:
                task.cancel()
            stop.close()
            reporter.observe(status)


@op(
    description="Runs one workload (the partition key) until the run is terminated; reports "
    "progress as observations of its source topics."
)
def consume(context: OpExecutionContext, config: ConsumerRunConfig) -> None:
    name = context.partition_key
    path, spec = find_workload(workloads_dir(), name)
    digest = spec_hash(spec)
    tagged = context.run.tags.get(SPEC_HASH_TAG)
    if tagged is not None and tagged != digest:
        context.log.warning(
            f"{path} changed since this run was launched (spec {tagged}, now {digest}); "
            "running the current file"
        )
    every = config.observe_every()
    pool_sizes = {spec.permits.pool: config.pool_size} if config.pool_size else None
    app = build_app([spec], pool_sizes, lake=settings.current().lake)
    stop = StopRequests(app, context)
    replica = replica_of(context.run.tags)
    reporter = Reporter(context, app, spec, replica, path)
    context.log.info(
        f"workload {name}: replica {replica} starting from {path} (spec {digest}); topics "
        f"{', '.join(spec.source.topics)}; pool {spec.permits.pool!r}"
        f"{f' of {config.pool_size}' if config.pool_size else ''}; "
        f"drain_timeout {spec.drain_timeout:g}s; observing every {every:g}s"
    )
    try:
        with run_endpoints(context, app, name, replica) as endpoints:
            reporter.link(endpoints)
            summaries = event_loop.run(serve(context, app, stop, reporter, every))
    except Exception as exc:
        context.log.error(f"workload {name}: stopped by an error: {exc!r}")
        raise
    for summary in summaries:
        context.log.info(stopped_line(summary))
    if stop.requested:
        _end_stopped(context, name, drained=not stop.immediate)


def stopped_line(summary: WorkloadSummary) -> str:
    """A workload's last words in its run's log, one form for runs of its own and host runs:
    what it did, and whether its commits went through."""
    counters = summary.counters
    return (
        f"workload {summary.name}: stopped after {summary.seconds:.1f}s: "
        f"{counters['completed']} records completed, {counters['failed']} failed attempts, "
        f"{counters['commits']} commits ({counters['commit_failures']} failed)"
    )


def _end_stopped(context: OpExecutionContext, name: str, drained: bool) -> None:
    """Return when the run was terminated (still CANCELING) and drained: a clean stop ends
    SUCCESS; raise the interrupt for any other stop (see the module docstring)."""
    run = context.instance.get_run_by_id(context.run_id)
    if not drained or run is None or run.status != DagsterRunStatus.CANCELING:
        raise DagsterExecutionInterruptedError(f"workload {name} stopped on request")
    reason = stop_reason_of(run.run_id, run.tags)
    if reason is not None:
        context.log.info(f"workload {name}: stopped ({reason}), drained and committed")
        return
    resume = "Re-execute this run"
    if replica_of(run.tags) == 0:
        resume += f" (or launch partition {name!r} of {CONSUMER_JOB_NAME})"
    context.log.info(
        f"workload {name}: stopped by a person, drained and committed. It stays stopped: "
        f"{resume} to resume it from its committed offsets."
    )


@job(
    name=CONSUMER_JOB_NAME,
    partitions_def=WORKLOAD_PARTITIONS,
    executor_def=in_process_executor,
    description="One workload's consumer, running until terminated (partition = workload).",
)
def consumer_job() -> None:
    consume()
