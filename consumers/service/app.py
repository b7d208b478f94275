"""Run several workloads in one process on one event loop, sharing one permit pool per name.

    ConsumerApp(workloads).run()   start sources and runners → wait for a stop request,
                                   a failed source, or idleness → stop every source
                                   (drain, final commit, close) → summary

Signals (when installed): the first SIGINT/SIGTERM asks for a graceful stop; a second one exits
at once. Exiting at once loses nothing: only completed records were ever committed.
"""

from __future__ import annotations

import asyncio
import logging
import os
import signal
import sys
from collections.abc import Callable
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


class ConsumerApp:
    """One process, many workloads, one permit pool per pool name."""

    def __init__(
        self,
        workloads: list[Workload],
        pool_sizes: dict[str, int] | None = None,
        clock: Clock | None = None,
        pool_factory: Callable[[str, int], PermitPool] = LocalPermitPool,
    ) -> None:
        names = [w.settings.name for w in workloads]
        if len(set(names)) != len(names):
            raise LanehouseError(f"workload names must be unique in one process: {names}")
        self.workloads = workloads
        self.clock = clock or RealClock()
        sizes = pool_sizes or {}
        self.pools: dict[str, PermitPool] = {
            name: pool_factory(name, sizes.get(name, DEFAULT_POOL_SIZE))
            for name in sorted({w.pool for w in workloads})
        }
        self.runners: dict[str, WorkloadRunner] = {}
        self.sources: dict[str, SourceThread] = {}
        self.producers: dict[str, AckedProducer] = {}
        #: Live tap of handled records (served by ``consumers.service.http``).
        self.tap = Tap()
        self._stop: asyncio.Event | None = None
        self._stop_requested = False
        self._signals = 0

    def request_stop(self) -> None:
        """Ask for a graceful stop (safe from the loop thread only); a request made before
        :meth:`run` started is honoured as soon as it starts."""
        self._stop_requested = True
        if self._stop is not None:
            self._stop.set()

    async def run(
        self, until_idle: float | None = None, install_signal_handlers: bool = False
    ) -> list[WorkloadSummary]:
        loop = asyncio.get_running_loop()
        self._stop = asyncio.Event()
        if self._stop_requested:
            self._stop.set()
        if install_signal_handlers:
            for sig in (signal.SIGINT, signal.SIGTERM):
                loop.add_signal_handler(sig, self._on_signal)
        started = self.clock.now()
        for pool in self.pools.values():
            await pool.start()
        failure: BaseException | None = None
        try:
            for workload in self.workloads:
                self._start(workload, loop)
            waits = [
                self._stop.wait(),
                *(s.failed for s in self.sources.values()),
                *(r.failed for r in self.runners.values()),
            ]
            if until_idle is not None:
                waits.append(self._until_idle(until_idle))
            await first_of(*waits)
            for future in (
                *(s.failed for s in self.sources.values()),
                *(r.failed for r in self.runners.values()),
            ):
                if future.done() and future.exception() is not None:
                    failure = future.exception()
        finally:
            await asyncio.gather(*(s.stop() for s in self.sources.values()))
            for runner in self.runners.values():
                runner.close()
            for producer in self.producers.values():
                await loop.run_in_executor(None, producer.close)
            for pool in self.pools.values():
                await pool.stop()
            if install_signal_handlers:
                for sig in (signal.SIGINT, signal.SIGTERM):
                    loop.remove_signal_handler(sig)
        failure = failure or self._unlanded() or self._uncommitted()
        if failure is not None:
            raise failure
        seconds = self.clock.now() - started
        return [self._summary(name, seconds) for name in self.runners]

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

    async def _until_idle(self, idle: float) -> None:
        """Return once every workload is assigned, has nothing to do, and got no record for
        ``idle`` seconds (a paused partition, a running handler or records known to wait
        behind a partition's position is not idleness)."""
        tick = min(idle / 4, 0.25)
        busy_seen = self.clock.now()
        while True:
            await self.clock.sleep(tick)
            runners = self.runners.values()
            behind = any(s.stalls.behind for s in self.sources.values())
            if not all(r.parts for r in runners) or any(r.busy for r in runners) or behind:
                busy_seen = self.clock.now()
                continue
            newest = max(busy_seen, *(r.last_ingest for r in runners))
            if self.clock.now() - newest >= idle:
                return

    def _unlanded(self) -> LandingError | None:
        """A stop that left records unlanded (their files failed through the whole drain: a full
        disk) is a failure, never a clean exit: their offsets stay uncommitted."""
        lines = [
            f"workload {name}: stopped with {sink.unlanded} records not landed "
            f"({sink.failure or 'their files were still being written'}); their offsets are not "
            "committed, the next run lands them"
            for name, runner in self.runners.items()
            if (sink := runner.landing) is not None and sink.unlanded
        ]
        for line in lines:
            log.error("%s", line)
        return LandingError("; ".join(lines)) if lines else None

    def _uncommitted(self) -> FinalCommitFailed | None:
        """A stop whose final commit failed (the broker went away first) is not clean."""
        failed = [
            FinalCommitFailed(name, reason)
            for name, source in self.sources.items()
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
        runner = self.runners[name]
        counters = runner.counters.snapshot()
        source = self.sources[name]
        counters.update(
            commits=source.commits,
            commit_failures=source.commit_failures,
            rebalances=source.rebalances,
            stall_recoveries=source.stalls.recoveries,
        )
        return WorkloadSummary(name=name, counters=counters, seconds=seconds)
