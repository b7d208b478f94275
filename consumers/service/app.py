"""Run several workloads in one process on one event loop, sharing one permit pool per name.

    ConsumerApp(workloads).run()   start sources and runners → wait for a stop request,
                                   a failed source, or idleness → stop every source
                                   (drain, final commit, close) → summary
    await app.add(workload)        while it runs: start one more workload beside the others
    await app.remove(name)         while it runs: drain, commit and close one workload alone

By default one workload's failure stops the app (a single-workload run has nothing else to do).
With ``isolate=True`` (a host of many workloads) it stops that workload alone: its summary and
its error go to :attr:`ConsumerApp.retired`, and the others go on.

Signals (when installed): the first SIGINT/SIGTERM asks for a graceful stop; a second one exits
at once. Exiting at once loses nothing: only completed records were ever committed.
"""

from __future__ import annotations

import asyncio
import logging
import os
import signal
import sys
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field

from consumers.backends.base import ConsumerFactory, Identify, Position, ProducerFactory
from consumers.clock import Clock, RealClock, first_of
from consumers.engine.commands import SourceCommands
from consumers.engine.incarnations import IncarnationWatch
from consumers.engine.producer import AckedProducer
from consumers.engine.runner import WorkloadRunner
from consumers.engine.settings import RunnerSettings
from consumers.engine.source import SourceThread
from consumers.engine.tap import Tap
from consumers.errors import FinalCommitFailed, LandingError, LanehouseError
from consumers.execution.executors import Handler
from consumers.execution.interceptors import Interceptor
from consumers.permits.pool import LocalPermitPool, PermitPool

log = logging.getLogger("lanehouse.app")

DEFAULT_POOL_SIZE = 1000


@dataclass(frozen=True)
class Workload:
    """Everything the app needs to run one workload, independent of how it was declared."""

    settings: RunnerSettings
    handler: Handler
    topics: list[str]
    consumer_factory: ConsumerFactory
    pool: str = "default"
    #: Needed when the settings name an output or dead-letter topic.
    producer_factory: ProducerFactory | None = None
    interceptors: tuple[Interceptor, ...] = ()
    #: Needed when the settings land records: the topics' current incarnations.
    identify: Identify | None = None
    #: Lake positions when the source's offsets are per session (Pulsar).
    position: Position | None = None
    #: Topic ids to watch while it runs, so a topic replaced under it is fenced (Kafka).
    incarnations: Identify | None = None


@dataclass
class WorkloadSummary:
    name: str
    counters: dict[str, int]
    seconds: float
    committed: dict[str, int] = field(default_factory=dict)


@dataclass(frozen=True)
class Retired:
    """A workload that left a running app: removed on request, or stopped by its own error."""

    summary: WorkloadSummary
    #: Why it stopped when it was not asked to (its source or runner failed), else ``None``.
    error: BaseException | None
    #: Why its stop was not clean (records not landed, the final commit failed), else ``None``.
    unclean: LanehouseError | None


class ConsumerApp:
    """One process, many workloads, one permit pool per pool name."""

    def __init__(
        self,
        workloads: list[Workload],
        pool_sizes: dict[str, int] | None = None,
        clock: Clock | None = None,
        pool_factory: Callable[[str, int], PermitPool] = LocalPermitPool,
        isolate: bool = False,
    ) -> None:
        names = [w.settings.name for w in workloads]
        if len(set(names)) != len(names):
            raise LanehouseError(f"workload names must be unique in one process: {names}")
        self.workloads = list(workloads)
        self.clock = clock or RealClock()
        self.isolate = isolate
        self._pool_sizes = pool_sizes or {}
        self._pool_factory = pool_factory
        self.pools: dict[str, PermitPool] = {
            name: pool_factory(name, self._pool_sizes.get(name, DEFAULT_POOL_SIZE))
            for name in sorted({w.pool for w in workloads})
        }
        self.runners: dict[str, WorkloadRunner] = {}
        self.sources: dict[str, SourceThread] = {}
        self.producers: dict[str, AckedProducer] = {}
        #: Workloads that left while the app ran (removed, or stopped alone by their error).
        self.retired: dict[str, Retired] = {}
        #: Live tap of handled records (served by ``consumers.service.http``).
        self.tap = Tap()
        self._stop: asyncio.Event | None = None
        self._stop_requested = False
        self._signals = 0
        self._loop: asyncio.AbstractEventLoop | None = None
        self._running = False
        #: Set once :meth:`run` has started its workloads: :meth:`add` works from then on.
        self.ready = asyncio.Event()
        self._started = 0.0
        #: Set with the first workload failure when failures are not isolated.
        self._failure: asyncio.Future[None] | None = None
        self._watchers: dict[str, asyncio.Task[None]] = {}
        #: Isolated failures being stopped (awaited by the app's own stop).
        self._retiring: set[asyncio.Task[Retired]] = set()

    def request_stop(self) -> None:
        """Ask for a graceful stop (safe from the loop thread only); a request made before
        :meth:`run` started is honoured as soon as it starts."""
        self._stop_requested = True
        if self._stop is not None:
            self._stop.set()

    async def run(
        self, until_idle: float | None = None, install_signal_handlers: bool = False
    ) -> list[WorkloadSummary]:
        loop = self._loop = asyncio.get_running_loop()
        self._stop = asyncio.Event()
        self._failure = loop.create_future()
        if self._stop_requested:
            self._stop.set()
        if install_signal_handlers:
            for sig in (signal.SIGINT, signal.SIGTERM):
                loop.add_signal_handler(sig, self._on_signal)
        started = self._started = self.clock.now()
        for pool in self.pools.values():
            await pool.start()
        failure: BaseException | None = None
        try:
            self._running = True
            for workload in self.workloads:
                self._start(workload, loop)
            self.ready.set()
            waits: list[Awaitable[object]] = [self._stop.wait(), self._failure]
            if until_idle is not None:
                waits.append(self._until_idle(until_idle))
            await first_of(*waits)
            if self._failure.done():
                failure = self._failure.exception()
        finally:
            self._running = False
            for watcher in self._watchers.values():
                watcher.cancel()
            await asyncio.gather(*(s.stop() for s in self.sources.values()), *self._retiring)
            for runner in self.runners.values():
                runner.close()
            for producer in self.producers.values():
                await loop.run_in_executor(None, producer.close)
            for pool in self.pools.values():
                await pool.stop()
            if install_signal_handlers:
                for sig in (signal.SIGINT, signal.SIGTERM):
                    loop.remove_signal_handler(sig)
        failure = failure or self._unlanded(self.runners) or self._uncommitted(self.sources)
        if failure is not None:
            raise failure
        seconds = self.clock.now() - started
        current = [self._summary(name, seconds) for name in self.runners]
        return [*(r.summary for r in self.retired.values()), *current]

    def _start(self, workload: Workload, loop: asyncio.AbstractEventLoop) -> None:
        """Build one workload's parts in dependency order: the channel of commands to the
        client, the runner that sends them, the source thread that applies them."""
        name = workload.settings.name
        settings = workload.settings
        producer = None
        if settings.output_topic or settings.dead_letter:
            if workload.producer_factory is None:
                raise LanehouseError(
                    f"workload {name!r} has outputs or dead letters: give it a producer"
                )
            producer = self.producers[name] = AckedProducer(name, workload.producer_factory, loop)
        commands = SourceCommands()
        runner = WorkloadRunner(
            settings,
            workload.handler,
            self.pools[workload.pool],
            commands,
            self.clock,
            producer=producer,
            tap=self.tap,
            interceptors=workload.interceptors,
            identify=workload.identify,
            position=workload.position,
        )
        source = SourceThread(
            name,
            workload.topics,
            workload.consumer_factory,
            loop,
            drain_timeout=settings.drain_timeout,
            stall_after=settings.stall_after,
            # Smaller buffers mean smaller polls, so a pause overshoots by little.
            batch_size=min(5000, settings.buffer_limit),
            clock=self.clock,
            watch=(
                IncarnationWatch(name, workload.incarnations)
                if workload.incarnations is not None
                else None
            ),
            runner=runner,
            commands=commands,
        )
        self.sources[name] = source
        self.runners[name] = runner
        runner.start()
        source.start()
        self._watchers[name] = asyncio.ensure_future(self._watch(name, source, runner))

    # ------------------------------------------------------------ while it runs

    async def add(self, workload: Workload) -> None:
        """Start ``workload`` beside the running ones (its pool is made on first use)."""
        loop = self._loop
        if loop is None or not self._running or self._stop is None or self._stop.is_set():
            raise LanehouseError(f"workload {workload.settings.name!r}: the app is not running")
        name = workload.settings.name
        if name in self.runners:
            raise LanehouseError(f"workload {name!r} already runs in this process")
        if workload.pool not in self.pools:
            size = self._pool_sizes.get(workload.pool, DEFAULT_POOL_SIZE)
            pool = self._pool_factory(workload.pool, size)
            await pool.start()
            self.pools[workload.pool] = pool
        self.retired.pop(name, None)
        self._start(workload, loop)
        self.workloads.append(workload)

    async def remove(self, name: str) -> Retired:
        """Stop one workload as the app stops them all (no more intake, drain, final commit,
        close), leaving the others running; its summary is kept in :attr:`retired`."""
        if not self._running or name not in self.runners:
            raise LanehouseError(f"workload {name!r} does not run in this process")
        # A task the app's own stop waits for: cancelling the caller must not cut the drain
        # short and skip the final commit.
        retiring = asyncio.ensure_future(self._retire(name, None))
        self._retiring.add(retiring)
        retiring.add_done_callback(self._retiring.discard)
        return await asyncio.shield(retiring)

    async def _watch(self, name: str, source: SourceThread, runner: WorkloadRunner) -> None:
        """Wait for the workload's source or runner to fail: stop the app, or (isolated) this
        workload alone."""
        await first_of(source.failed, runner.failed)
        errors = [f.exception() for f in (source.failed, runner.failed) if f.done()]
        error = next((e for e in errors if e is not None), None)
        if error is None:
            return
        if not self.isolate:
            if self._failure is not None and not self._failure.done():
                self._failure.set_exception(error)
            return
        log.error("workload %s: stopped alone, its neighbours go on: %s", name, error)
        self._watchers.pop(name, None)  # this task: the retirement must not cancel itself
        retiring = asyncio.ensure_future(self._retire(name, error))
        self._retiring.add(retiring)
        retiring.add_done_callback(self._retiring.discard)

    async def _retire(self, name: str, error: BaseException | None) -> Retired:
        """Take the workload out of every table first (reports and metrics stop showing it),
        then stop its parts."""
        self.workloads = [w for w in self.workloads if w.settings.name != name]
        watcher = self._watchers.pop(name, None)
        if watcher is not None:
            watcher.cancel()
        source, runner = self.sources.pop(name), self.runners.pop(name)
        producer = self.producers.pop(name, None)
        await source.stop()
        runner.close()
        if producer is not None:
            await asyncio.get_running_loop().run_in_executor(None, producer.close)
        unclean = self._unlanded({name: runner}) or self._uncommitted({name: source})
        summary = _summary(name, runner, source, self.clock.now() - self._started)
        retired = self.retired[name] = Retired(summary, error, unclean)
        return retired

    async def _until_idle(self, idle: float) -> None:
        """Return once every workload is assigned, has nothing to do, and its client's polls
        delivered nothing for ``idle`` seconds since (a paused partition, a running handler or
        records known to wait behind a partition's position is not idleness; neither is time
        without polls: see :class:`~consumers.engine.liveness.QuietPolls`)."""
        tick = min(idle / 4, 0.25)
        busy_seen = self.clock.now()
        while True:
            await self.clock.sleep(tick)
            runners, sources = self.runners.values(), self.sources.values()
            behind = any(s.stalls.behind for s in sources)
            if not all(r.parts for r in runners) or any(r.busy for r in runners) or behind:
                busy_seen = self.clock.now()
                continue
            newest = max([busy_seen, *(r.last_ingest for r in runners)])
            if all(s.quiet.quiet_for(newest) >= idle for s in sources):
                return

    def _unlanded(self, runners: dict[str, WorkloadRunner]) -> LandingError | None:
        """A stop that left records unlanded (their files failed through the whole drain: a full
        disk) is a failure, never a clean exit: their offsets stay uncommitted."""
        lines = [
            f"workload {name}: stopped with {sink.unlanded} records not landed "
            f"({sink.failure or 'their files were still being written'}); their offsets are not "
            "committed, the next run lands them"
            for name, runner in runners.items()
            if (sink := runner.landing) is not None and sink.unlanded
        ]
        for line in lines:
            log.error("%s", line)
        return LandingError("; ".join(lines)) if lines else None

    def _uncommitted(self, sources: dict[str, SourceThread]) -> FinalCommitFailed | None:
        """A stop whose final commit failed (the broker went away first) is not clean."""
        failed = [
            FinalCommitFailed(name, reason)
            for name, source in sources.items()
            if (reason := source.final_commit_failure) is not None
        ]
        for error in failed:
            log.error("%s", error)
        return failed[0] if failed else None

    def _on_signal(self) -> None:
        self._signals += 1
        if self._signals == 1:
            log.warning("stop requested: draining in-flight records, then committing")
            self.request_stop()
        else:
            print("second signal: exiting now (nothing unfinished was committed)", file=sys.stderr)
            os._exit(130)

    def _summary(self, name: str, seconds: float) -> WorkloadSummary:
        return _summary(name, self.runners[name], self.sources[name], seconds)


def _summary(
    name: str, runner: WorkloadRunner, source: SourceThread, seconds: float
) -> WorkloadSummary:
    counters = runner.counters.snapshot()
    counters.update(
        commits=source.commits,
        commit_failures=source.commit_failures,
        rebalances=source.rebalances,
        stall_recoveries=source.stalls.recoveries,
    )
    return WorkloadSummary(name=name, counters=counters, seconds=seconds)
