"""The host job: one Dagster run (partition key = host, ``host.0``, ...) that runs many workloads
in one engine, as the discovery sensor placed them (:mod:`orchestration.workloads.placement`).

    launch ─► every RECONCILE_SECONDS read the host's members (:mod:`.host_store`) and make the
           engine match: start added workloads, stop removed ones (drain, final commit), restart
           one whose spec hash changed. Each member reports on its own asset as a consumer run
           does (:class:`~orchestration.workloads.reporting.Reporter`).
    a member fails (its source, or a handler misusing an outcome) ─► it stops alone, its
           neighbours go on; it starts again after the restart policy's backoff
    terminate ─► every member drains and commits ─► SUCCESS, as a consumer run ends

Why one process: a consumer run costs ~250 MB where one more workload in a running engine costs
~1.3 MB, and workloads of one host share their permit pools in-process. Termination, signals,
heartbeats (under the host's name) and the run-status watch are the consumer job's
(:mod:`orchestration.workloads.job`).
"""

# No ``from __future__ import annotations``: Dagster reads the op's ``config`` annotation.
import asyncio
import functools
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from typing import Final

from dagster import (
    DagsterExecutionInterruptedError,
    DagsterRunStatus,
    DynamicPartitionsDefinition,
    Failure,
    OpExecutionContext,
    in_process_executor,
    job,
    op,
)

from consumers import ConsumerApp, load_spec
from consumers.config.platform import load_platform_config
from consumers.engine import event_loop
from consumers.service.launch import pool_factory, workload_from_spec
from orchestration import settings
from orchestration.workloads.discovery_model import RestartPolicy, policy_from_env
from orchestration.workloads.endpoints import RunEndpoints, run_endpoints
from orchestration.workloads.host_store import (
    MemberState,
    MemberStatus,
    read_members,
    write_status,
)
from orchestration.workloads.job import (
    ConsumerRunConfig,
    StopRequests,
    beat,
    stop_signals,
    stopped_line,
    watch_run_status,
)
from orchestration.workloads.names import HOST_JOB_NAME, HOST_PARTITIONS_NAME, workloads_dir
from orchestration.workloads.registry import SpecCache, read_registry
from orchestration.workloads.reporting import Reporter

__all__ = ["HOST_PARTITIONS", "host_job"]

#: The UI shows one row per host run.
HOST_PARTITIONS: Final = DynamicPartitionsDefinition(name=HOST_PARTITIONS_NAME)
#: How often a host reads its members (seconds).
RECONCILE_SECONDS: Final = 2.0


@dataclass
class _Member:
    spec_hash: str  # the hash it was started for (the sensor's), not the file's of now
    reporter: Reporter
    reports: asyncio.Task[None]
    started: float


@dataclass
class _Waiting:
    failures: int
    until: float


class Host:
    """Keeps the engine's workloads equal to the host's members (on the op's thread only)."""

    def __init__(
        self,
        context: OpExecutionContext,
        app: ConsumerApp,
        host: str,
        every: float,
        policy: RestartPolicy,
    ) -> None:
        self._context, self._app, self.host = context, app, host
        self._every, self._policy = every, policy
        self._cache = SpecCache()
        # Its own thread: the loop's default executor queues every member's report and check
        # writes, and behind 50 of them on SQLite a change of members waited two minutes.
        self._reads = ThreadPoolExecutor(max_workers=1, thread_name_prefix=f"lh-{host}")
        self.members: dict[str, _Member] = {}
        self.waiting: dict[str, _Waiting] = {}
        #: The run's HTTP endpoints, linked in each member's reports (None: it serves none).
        self.endpoints: RunEndpoints | None = None

    async def keep(self) -> None:
        """Reconcile every :data:`RECONCILE_SECONDS` until cancelled."""
        await self._app.ready.wait()
        while True:
            try:
                await self.reconcile()
            except Exception as exc:  # a storage hiccup: the members run on, try again
                self._context.log.warning(f"host {self.host}: members not read: {exc!r}")
            await asyncio.sleep(RECONCILE_SECONDS)

    async def reconcile(self) -> None:
        instance = self._context.instance
        loop = asyncio.get_running_loop()
        wanted = await loop.run_in_executor(self._reads, read_members, instance, self.host)
        if wanted is None:
            return  # never written, or unreadable: change nothing
        now = time.time()
        for name, member in list(self.members.items()):
            if name in self._app.retired:  # the engine stopped it alone: it failed
                self._failed(name, member, now)
            elif name not in self._app.runners:
                continue  # still draining after its failure: retired once stopped
            elif wanted.get(name) != member.spec_hash:
                await self._stop(name, "removed" if name not in wanted else "spec changed")
        for name in list(self.waiting):
            if name not in wanted:
                del self.waiting[name]
        due = [
            (name, spec_hash)
            for name, spec_hash in sorted(wanted.items())
            if name not in self.members
            and (name not in self.waiting or self.waiting[name].until <= now)
        ]
        if not due:
            return
        directory = workloads_dir()
        read = functools.partial(read_registry, directory, cache=self._cache)
        registry = await loop.run_in_executor(self._reads, read)
        for name, spec_hash in due:
            entry = registry.workloads.get(name)
            if entry is None:
                self._wait(name, f"no valid spec in {directory} names {name!r}", now)
            else:
                await self._start(name, spec_hash, Path(entry.file), now)

    async def _start(self, name: str, spec_hash: str, path: Path, now: float) -> None:
        try:
            loop = asyncio.get_running_loop()
            spec = await loop.run_in_executor(self._reads, load_spec, path)  # imports the handler
            await self._app.add(workload_from_spec(spec, settings.current().lake))
        except Exception as exc:
            self._wait(name, f"{type(exc).__name__}: {exc}", now)
            return
        reporter = Reporter(self._context, self._app, spec, 0, path, tag_assignment=False)
        reporter.link(self.endpoints)
        reports = asyncio.ensure_future(reporter.every(self._every))
        self.members[name] = _Member(spec_hash, reporter, reports, now)
        failures = self.waiting.pop(name).failures if name in self.waiting else 0
        self._context.log.info(f"host {self.host}: workload {name} started (spec {spec_hash})")
        self._status(name, "running", failures=failures)

    async def _stop(self, name: str, reason: str) -> None:
        member = self.members.pop(name)
        member.reports.cancel()
        try:
            member.reporter.observe("stopping")
        except Exception as exc:  # a failed report must not keep a removed workload running
            self._context.log.warning(f"host {self.host}: last report of {name} failed: {exc!r}")
        try:
            retired = await self._app.remove(name)
        finally:  # the sensor holds a removed workload's page until it reads this
            if reason == "removed":
                self._status(name, "stopped")
        done = retired.summary.counters["completed"]
        unclean = f"; not clean: {retired.unclean}" if retired.unclean else ""
        self._context.log.info(
            f"host {self.host}: workload {name} stopped ({reason}) after {done} records{unclean}"
        )

    def _failed(self, name: str, member: _Member, now: float) -> None:
        del self.members[name]
        member.reports.cancel()
        error = self._app.retired[name].error
        previous = self.waiting.get(name)
        stable = now - member.started >= self._policy.stable_after
        failures = 1 if previous is None or stable else previous.failures + 1
        self._wait(name, repr(error), now, failures)

    def _wait(self, name: str, error: str, now: float, failures: int | None = None) -> None:
        if failures is None:
            previous = self.waiting.get(name)
            failures = previous.failures + 1 if previous is not None else 1
        delay = self._policy.delay(failures)
        self.waiting[name] = _Waiting(failures, now + delay)
        self._context.log.error(
            f"host {self.host}: workload {name} stopped by an error (failure {failures}), its "
            f"neighbours go on; starting it again in {delay:g}s: {error}"
        )
        self._status(name, "waiting", error=error, failures=failures)

    def _status(
        self, name: str, state: MemberState, error: str | None = None, failures: int = 0
    ) -> None:
        """Record ``name``'s state in this host run, for its page and the sensor."""
        status = MemberStatus(
            host=self.host,
            run_id=self._context.run_id,
            state=state,
            error=error,
            failures=failures,
        )
        try:
            write_status(self._context.instance, name, status)
        except Exception as exc:  # the engine matters more than the report
            self._context.log.warning(f"host {self.host}: status of {name} not written: {exc!r}")

    def observe_all(self, status: str) -> None:
        """The last report of every member as the host stops, and their state: stopped."""
        self._reads.shutdown(wait=False, cancel_futures=True)
        for name, member in self.members.items():
            member.reports.cancel()
            member.reporter.observe(status)
            self._status(name, "stopped")


async def serve_host(
    context: OpExecutionContext, app: ConsumerApp, host: Host, stop: StopRequests
) -> None:
    with stop_signals(asyncio.get_running_loop(), stop) as trapped:
        if not trapped:
            context.log.warning("op off the main thread: no signals; stopping on the run status")
        engine = asyncio.ensure_future(app.run())
        # Beats and the status watch on a thread of their own: queued behind 50 members' report
        # writes, a host's beats stopped for 120 s and the sensor declared it dead.
        liveness = ThreadPoolExecutor(max_workers=1, thread_name_prefix=f"lh-{host.host}-beat")
        helpers = [
            asyncio.ensure_future(beat(context, host.host, liveness)),
            asyncio.ensure_future(host.keep()),
            asyncio.ensure_future(watch_run_status(context, stop, liveness)),
        ]
        status = "failed"
        try:
            for summary in await engine:
                context.log.info(f"host {host.host}: {stopped_line(summary)}")
            status = "stopped"
        finally:
            for task in helpers:
                task.cancel()
            liveness.shutdown(wait=False, cancel_futures=True)
            stop.close()
            host.observe_all(status)


@op(description="Runs the workloads placed on this host (the partition key) in one engine.")
def host(context: OpExecutionContext, config: ConsumerRunConfig) -> None:
    name = context.partition_key
    if config.pool_size is not None:
        raise Failure(
            "pool_size sizes one workload's pool; a host's pools are sized by the "
            "platform config (shared pools) or the engine's default"
        )
    app = ConsumerApp([], pool_factory=pool_factory(load_platform_config()), isolate=True)
    stop = StopRequests(app, context)
    every = config.observe_every()
    keeper = Host(context, app, name, every, policy_from_env())
    context.log.info(f"host {name}: starting; reading its members every {RECONCILE_SECONDS:g}s")
    with run_endpoints(context, app, name, host=True) as endpoints:
        keeper.endpoints = endpoints
        event_loop.run(serve_host(context, app, keeper, stop))
    if stop.requested:
        run = context.instance.get_run_by_id(context.run_id)
        if stop.immediate or run is None or run.status != DagsterRunStatus.CANCELING:
            raise DagsterExecutionInterruptedError(f"host {name} stopped on request")
        context.log.info(f"host {name}: stopped, every workload drained and committed")


@job(
    name=HOST_JOB_NAME,
    partitions_def=HOST_PARTITIONS,
    executor_def=in_process_executor,
    description="Many workloads in one consumer process, as the discovery sensor places them "
    "(partition = host).",
)
def host_job() -> None:
    host()
