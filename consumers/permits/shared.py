"""A permit pool shared by every process of a deployment, leased through a database.

Records never touch the database: each workload in this process has a local *limit* and takes
permits against it in memory, exactly as with the local pool. A background task renews this
process's leases every ``sync_interval`` (sooner when a workload waits and the pool has free
permits): it reports each workload's demand and use, and gets back its limits
(:mod:`consumers.permits.store` divides the pool).

Safety: the database never grants more than the pool's size in total, and a process uses no
more than it was granted:

- a limit goes **up** only after the larger grant is committed;
- a limit goes **down** at once, and the grant in the database follows at the next renewal,
  never below what may still be in use (``floor``); a worker holding a permit above its limit
  hands it back after its current record (``should_yield``);
- a process that cannot renew stops starting records when its lease would end, measured from
  before the renewal that granted it, so it stops no later than the others see it expire.
  Records already running finish (keep handler timeouts well below ``lease_ttl``).

A killed process's leases simply expire; the others renew into its share within ``lease_ttl``.
A clean stop deletes its leases at once.
"""

from __future__ import annotations

import asyncio
import logging
import os
import secrets
import socket
from collections.abc import Callable
from functools import partial

from consumers.clock import Clock, RealClock, first_of
from consumers.errors import PermitStoreError
from consumers.permits.pool import PermitClient, PermitPool
from consumers.permits.store import LeaseReport, PermitStore, Renewal

log = logging.getLogger("lanehouse.permits")

#: Renewals triggered by a waiting workload are at least this far apart (seconds).
_MIN_RENEW_GAP = 0.02
#: A lease is used for this fraction of its TTL only (clock rates differ a little).
_LEASE_MARGIN = 0.9


def holder_id() -> str:
    """This process in lease rows: host, pid and a random suffix (pids are reused)."""
    return f"{socket.gethostname()}:{os.getpid()}:{secrets.token_hex(3)}"


class SharedPermitPool(PermitPool):
    """One process's side of a database-leased pool; see the module docstring."""

    def __init__(
        self,
        name: str,
        store: PermitStore,
        *,
        lease_ttl: float = 10.0,
        sync_interval: float = 0.25,
        holder: str | None = None,
        clock: Clock | None = None,
    ) -> None:
        super().__init__(name)
        self._clock = clock or RealClock()
        self.store = store
        self.lease_ttl = lease_ttl
        self.sync_interval = sync_interval
        self.holder = holder or holder_id()
        #: The pool's size in the database (known after the first renewal).
        self.size = 0
        self._pending: dict[str, Callable[[], int]] = {}
        self._wait_seconds: dict[str, float] = {}
        self._pool_free = 0
        self._wake = asyncio.Event()
        self._task: asyncio.Task[None] | None = None
        #: The renewal whose thread is running or ran last (a stop waits for it).
        self._renewing: asyncio.Future[Renewal] | None = None
        self._expiry: asyncio.TimerHandle | None = None
        self._reported_at = self._clock.now()
        self._failing = False
        #: Renewals that failed since the start (a database away, or a bug: see the log).
        self.renewal_failures = 0

    # ------------------------------------------------------------------ PermitPool

    def _registered(self, client: PermitClient, pending: Callable[[], int]) -> None:
        client.limit = 0  # nothing until the database grants it
        self._pending[client.name] = pending
        self._wait_seconds[client.name] = 0.0
        self._wake.set()

    def _unregistered(self, client: PermitClient) -> None:
        self._wake.set()

    def try_acquire(self, client: PermitClient) -> bool:
        if client.held < client.limit:
            client.held += 1
            return True
        return False

    def wait(self, client: PermitClient) -> None:
        super().wait(client)
        if client.limit < client.cap and (self._pool_free > 0 or client.limit == 0):
            self._wake.set()

    def release(self, client: PermitClient) -> None:
        client.held -= 1
        if client.waiting and client.held < client.limit:
            self._dispatch(client)

    def should_yield(self, client: PermitClient) -> bool:
        return client.held > client.limit

    @property
    def free(self) -> int:
        """Permits this process may still take without a renewal."""
        return sum(max(c.limit - c.held, 0) for c in self.clients)

    async def start(self) -> None:
        self._task = asyncio.ensure_future(self._renew_forever())

    async def stop(self) -> None:
        """Stop renewing and delete this process's leases (best effort: else they expire)."""
        if self._task is not None:
            self._task.cancel()
            await asyncio.gather(self._task, return_exceptions=True)
        if self._renewing is not None:
            # A renewal's thread is not stopped by the cancel: were it to finish after the
            # release below, it would write this process's leases back (1 stop in ~30 did).
            await asyncio.gather(self._renewing, return_exceptions=True)
        if self._expiry is not None:
            self._expiry.cancel()
        try:
            await asyncio.to_thread(self.store.release, self.name, self.holder)
        except PermitStoreError as exc:
            log.warning("%s; its leases expire within %g s", exc, self.lease_ttl)

    # ------------------------------------------------------------------ renewals

    async def _renew_forever(self) -> None:
        last = 0.0
        while True:
            gap = _MIN_RENEW_GAP - (self._clock.now() - last)
            if gap > 0:
                await self._clock.sleep(gap)
            self._wake.clear()
            last = self._clock.now()
            await self._renew_once(last)
            await first_of(self._wake.wait(), self._clock.sleep(self.sync_interval))

    async def _renew_once(self, started: float) -> None:
        reports = self._reports(started)
        self._renewing = asyncio.get_running_loop().run_in_executor(
            None, partial(self.store.renew, self.name, self.holder, reports, self.lease_ttl)
        )
        try:
            renewal = await asyncio.shield(self._renewing)
        except Exception as exc:  # a bug must not end renewals: the lease would just run out
            self.renewal_failures += 1
            if not self._failing:
                log.warning(
                    "pool %s: cannot renew permits (%s); running records keep theirs, new ones "
                    "wait once the lease ends",
                    self.name,
                    exc,
                    exc_info=not isinstance(exc, PermitStoreError),
                )
            self._failing = True
            return
        if self._failing:
            log.warning("pool %s: permit database reachable again", self.name)
            self._failing = False
        self._apply(renewal, started + self.lease_ttl * _LEASE_MARGIN)

    def _reports(self, now: float) -> list[LeaseReport]:
        elapsed = now - self._reported_at
        self._reported_at = now
        reports = []
        for c in self.clients:
            # Held back by the pool: at its lease, below its own concurrency (at its concurrency
            # it waits for its records, not for a permit).
            if c.waiting and c.held >= c.limit and c.limit < c.cap:
                self._wait_seconds[c.name] += elapsed
            demand = min(c.cap, c.held + max(self._pending[c.name](), 0))
            reports.append(
                LeaseReport(
                    workload=c.name,
                    weight=c.weight,
                    cap=c.cap,
                    demand=demand,
                    in_use=c.held,
                    floor=max(c.held, c.limit),
                    wait_seconds=self._wait_seconds[c.name],
                )
            )
        return reports

    def _apply(self, renewal: Renewal, deadline: float) -> None:
        now = self._clock.now()
        if now >= deadline:
            return  # the renewal took longer than the lease: what it granted is already gone
        self.size = renewal.size
        self._pool_free = renewal.free
        for c in self.clients:
            c.limit = min(renewal.limits.get(c.name, 0), c.cap)
        if self._expiry is not None:
            self._expiry.cancel()
        self._expiry = asyncio.get_running_loop().call_later(deadline - now, self._expire)
        for c in list(self._waiters):
            if c.held < c.limit:
                self._dispatch(c)

    def _expire(self) -> None:
        """The lease ran out without renewal: start nothing new until the database answers."""
        log.warning("pool %s: lease expired; new records wait for the permit database", self.name)
        for c in self.clients:
            c.limit = 0
        self._pool_free = 0

    def _dispatch(self, client: PermitClient) -> None:
        """Hand ``client`` permits up to its limit while it still has work for them."""
        while client.held < client.limit:
            client.held += 1
            client.grants += 1
            if not client.on_grant():
                client.held -= 1
                client.grants -= 1
                client.waiting = False
                self._waiters.remove(client)
                return
