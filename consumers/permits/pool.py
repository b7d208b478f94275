"""The global permit pool: one budget of concurrent records shared fairly by every workload.

Lifecycle: a workload ``register``s once and gets a :class:`PermitClient`. A worker takes a
permit with :meth:`PermitPool.try_acquire` (never blocks); when none is free the workload calls
:meth:`PermitPool.wait` and the pool later calls the client's ``on_grant`` with a permit already
counted as held. Every permit goes back through :meth:`PermitPool.release`.

Fairness is weighted max-min: a freed permit goes to the waiting workload with the smallest
``held / weight`` that is still under its own cap, so a flooded workload can never starve a quiet
one, and unused share is lent to whoever has demand (work-conserving). Each workload's own
``concurrency`` cap applies after the pool.

Everything here runs on the engine's event-loop thread, so no locks. The cross-process pool
(:mod:`consumers.permits.shared`) keeps this interface and gives each client a ``limit`` that
follows its leases.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Callable


class PermitClient:
    """One workload's account in a pool."""

    __slots__ = ("cap", "grants", "held", "limit", "name", "on_grant", "waiting", "weight")

    def __init__(self, name: str, weight: float, cap: int, on_grant: Callable[[], bool]) -> None:
        if weight <= 0:
            raise ValueError(f"permit weight for {name!r} must be > 0, got {weight}")
        if cap < 1:
            raise ValueError(f"concurrency for {name!r} must be >= 1, got {cap}")
        self.name = name
        self.weight = weight
        self.cap = cap
        #: Permits it may hold now: its cap locally, its lease in a shared pool.
        self.limit = cap
        self.held = 0
        self.waiting = False
        #: Total permits granted to this client through the wait queue (a fairness metric).
        self.grants = 0
        #: Called with one permit already held; returns False if it no longer needs it.
        self.on_grant = on_grant


class PermitPool(ABC):
    """A budget of permits shared by workloads; see the module docstring for the lifecycle."""

    def __init__(self, name: str) -> None:
        self.name = name
        self.clients: list[PermitClient] = []
        self._waiters: list[PermitClient] = []

    def register(
        self,
        name: str,
        weight: float,
        cap: int,
        on_grant: Callable[[], bool],
        pending: Callable[[], int] | None = None,
    ) -> PermitClient:
        """``pending`` says how many more permits the workload could use now (its demand)."""
        if any(c.name == name for c in self.clients):
            raise ValueError(f"workload {name!r} is already registered in pool {self.name!r}")
        client = PermitClient(name, weight, cap, on_grant)
        self.clients.append(client)
        self._registered(client, pending or (lambda: 0))
        return client

    def unregister(self, client: PermitClient) -> None:
        if client.held:
            raise ValueError(f"workload {client.name!r} still holds {client.held} permits")
        self.clients.remove(client)
        if client in self._waiters:
            self._waiters.remove(client)
        self._unregistered(client)

    def _registered(self, client: PermitClient, pending: Callable[[], int]) -> None:  # noqa: B027
        """Hook: a pool that reports demand keeps ``pending``."""

    def _unregistered(self, client: PermitClient) -> None:  # noqa: B027
        """Hook: after a client left."""

    def waiting_clients(self) -> list[str]:
        return [c.name for c in self._waiters]

    @abstractmethod
    def try_acquire(self, client: PermitClient) -> bool: ...

    def wait(self, client: PermitClient) -> None:
        """Queue ``client`` for a grant (once, however often it asks)."""
        if not client.waiting:
            client.waiting = True
            self._waiters.append(client)

    @abstractmethod
    def release(self, client: PermitClient) -> None: ...

    @abstractmethod
    def should_yield(self, client: PermitClient) -> bool:
        """True when a permit ``client`` holds is owed to a more deserving waiter."""

    async def start(self) -> None:  # noqa: B027 (a hook: local pools need nothing)
        """Called on the event loop before any workload runs."""

    async def stop(self) -> None:  # noqa: B027
        """Called on the event loop after every workload stopped."""


class LocalPermitPool(PermitPool):
    """An in-process pool of ``size`` permits with weighted max-min fairness."""

    def __init__(self, name: str, size: int) -> None:
        if size < 1:
            raise ValueError(f"permit pool {name!r} needs size >= 1, got {size}")
        super().__init__(name)
        self.size = size
        self.free = size

    def try_acquire(self, client: PermitClient) -> bool:
        if self.free > 0 and client.held < client.cap:
            self.free -= 1
            client.held += 1
            return True
        return False

    def release(self, client: PermitClient) -> None:
        client.held -= 1
        self.free += 1
        if self._waiters:
            self._dispatch()

    def should_yield(self, client: PermitClient) -> bool:
        waiters = self._waiters
        if not waiters or self.free > 0 or (len(waiters) == 1 and waiters[0] is client):
            return False  # asked once a record: no other workload waits, the usual case
        share = client.held / client.weight
        return any(
            w is not client and w.held < w.cap and (w.held + 1) / w.weight < share
            for w in self._waiters
        )

    def _dispatch(self) -> None:
        """Hand free permits to waiters, the one furthest below its weighted share first."""
        while self.free > 0 and self._waiters:
            eligible = [w for w in self._waiters if w.held < w.cap]
            if not eligible:
                return
            chosen = min(eligible, key=lambda w: w.held / w.weight)
            self.free -= 1
            chosen.held += 1
            chosen.grants += 1
            if not chosen.on_grant():
                # It no longer has work: take the permit back and stop it waiting.
                chosen.held -= 1
                chosen.grants -= 1
                self.free += 1
                chosen.waiting = False
                self._waiters.remove(chosen)
