"""The local permit pool: weighted max-min fairness, caps, yielding and declined grants."""

from __future__ import annotations

import random
from collections.abc import Callable

import pytest

from consumers import LocalPermitPool, PermitClient

pytestmark = pytest.mark.unit


class Workload:
    """A pool client that records every grant; ``wants`` says whether it still has work."""

    def __init__(self, pool: LocalPermitPool, name: str, weight: float = 1.0, cap: int = 1000):
        self.pool = pool
        self.name = name
        self.wants = True
        self.client: PermitClient = pool.register(name, weight, cap, self._on_grant)
        self.grants: list[str] = []
        self.max_held = 0

    def _on_grant(self) -> bool:
        # The pool counts the permit as held before asking.
        self.max_held = max(self.max_held, self.client.held)
        if not self.wants:
            return False
        self.grants.append(self.name)
        return True

    def flood(self) -> None:
        """Take every permit it can, then wait for more (a workload with endless backlog)."""
        while self.pool.try_acquire(self.client):
            self.max_held = max(self.max_held, self.client.held)
        self.pool.wait(self.client)

    @property
    def held(self) -> int:
        return self.client.held


def _shares(size: int, weights: list[float]) -> list[float]:
    total = sum(weights)
    return [size * w / total for w in weights]


def _run_flooded(
    pool: LocalPermitPool, workloads: list[Workload], steps: int, pick: Callable[[], int]
) -> None:
    """Each step one holder (chosen by ``pick``) finishes a record and releases its permit;
    every workload stays flooded, so it waits again."""
    for _ in range(steps):
        holders = [w for w in workloads if w.held > 0]
        releaser = holders[pick() % len(holders)]
        pool.release(releaser.client)
        for w in workloads:
            w.flood()
        # Work-conserving: with demand everywhere, no permit stays idle.
        assert pool.free == 0
        assert sum(w.held for w in workloads) == pool.size


@pytest.mark.parametrize(
    ("size", "weights"),
    [(10, [1, 1]), (12, [3, 1]), (9, [1, 1]), (10, [3, 1]), (20, [1, 2, 5])],
)
@pytest.mark.parametrize("seed", [0, 1, 2])
def test_flooded_workloads_converge_to_their_weighted_shares(
    size: int, weights: list[float], seed: int
) -> None:
    pool = LocalPermitPool("p", size)
    workloads = [Workload(pool, f"w{i}", weight) for i, weight in enumerate(weights)]
    # The first workload floods first and grabs the whole pool.
    for w in workloads:
        w.flood()
    assert workloads[0].held == size
    rnd = random.Random(seed)
    _run_flooded(pool, workloads, steps=size * 4, pick=lambda: rnd.randrange(1000))
    for w, share in zip(workloads, _shares(size, weights), strict=True):
        assert abs(w.held - share) <= 1, (w.name, w.held, share)
    # And it stays there.
    for _ in range(size * 4):
        _run_flooded(pool, workloads, steps=1, pick=lambda: rnd.randrange(1000))
        for w, share in zip(workloads, _shares(size, weights), strict=True):
            assert abs(w.held - share) <= 1, (w.name, w.held, share)


@pytest.mark.parametrize("quiet_weight", [1.0, 0.1])
def test_a_quiet_workload_gets_the_very_next_release(quiet_weight: float) -> None:
    pool = LocalPermitPool("p", 4)
    loud = Workload(pool, "loud", weight=5.0)
    quiet = Workload(pool, "quiet", weight=quiet_weight)
    loud.flood()
    assert loud.held == 4
    assert not pool.try_acquire(quiet.client)  # nothing free: it has to wait
    pool.wait(quiet.client)

    pool.release(loud.client)
    assert quiet.grants == ["quiet"]
    assert loud.grants == []
    assert (loud.held, quiet.held, pool.free) == (3, 1, 0)


def test_a_quiet_workload_is_served_before_the_flood_every_time_it_waits() -> None:
    pool = LocalPermitPool("p", 6)
    loud = Workload(pool, "loud")
    quiet = Workload(pool, "quiet")
    loud.flood()
    grants: list[str] = []
    for _ in range(3):
        pool.wait(quiet.client)
        pool.release(loud.client)
        grants.append("quiet" if quiet.grants else "loud")
        quiet.grants.clear()
        loud.flood()
    assert grants == ["quiet", "quiet", "quiet"]
    assert (loud.held, quiet.held) == (3, 3)


def test_the_cap_holds_even_when_the_pool_is_free() -> None:
    pool = LocalPermitPool("p", 10)
    capped = Workload(pool, "capped", cap=3)
    other = Workload(pool, "other")
    capped.flood()
    assert capped.held == 3
    assert pool.free == 7
    assert not pool.try_acquire(capped.client)

    # Waiting at the cap: a release elsewhere must not push it over.
    assert pool.try_acquire(other.client)
    pool.release(other.client)
    assert capped.held == 3
    assert capped.grants == []

    # Its own release gives the permit straight back to it, never more.
    rnd = random.Random(7)
    other.flood()
    for _ in range(50):
        holder = capped if rnd.random() < 0.5 and capped.held else other
        pool.release(holder.client)
        capped.flood()
        other.flood()
        assert capped.held <= 3
    assert capped.max_held == 3
    assert capped.held == 3
    assert other.held == 7


def test_should_yield() -> None:
    pool = LocalPermitPool("p", 4)
    a = Workload(pool, "a")
    b = Workload(pool, "b")
    for _ in range(3):
        assert pool.try_acquire(a.client)
    # A permit is free: nobody needs to give one up.
    pool.wait(b.client)
    assert pool.free == 1
    assert not pool.should_yield(a.client)

    assert pool.try_acquire(a.client)  # a holds all 4, b waits with none
    assert pool.should_yield(a.client)
    assert not pool.should_yield(b.client)  # the waiter itself never yields to itself

    # a 3 / b 1: b taking one more would still be below a's share -> yield.
    pool.release(a.client)
    assert (a.held, b.held) == (3, 1)
    assert pool.should_yield(a.client)
    # a 2 / b 2: equal shares, b one more would be above: keep it.
    pool.release(a.client)
    assert (a.held, b.held) == (2, 2)
    assert not pool.should_yield(a.client)


def test_should_yield_does_not_swap_permits_between_near_equal_shares() -> None:
    pool = LocalPermitPool("p", 5)
    a = Workload(pool, "a")
    b = Workload(pool, "b")
    for _ in range(3):
        assert pool.try_acquire(a.client)
    for _ in range(2):
        assert pool.try_acquire(b.client)
    pool.wait(b.client)
    # a 3 / b 2: handing one to b would only make it b 3 / a 2, so a keeps it.
    assert not pool.should_yield(a.client)


def test_should_yield_is_false_without_waiters_or_for_a_capped_waiter() -> None:
    pool = LocalPermitPool("p", 4)
    a = Workload(pool, "a")
    b = Workload(pool, "b", cap=1)
    for _ in range(3):
        assert pool.try_acquire(a.client)
    assert pool.try_acquire(b.client)
    assert not pool.should_yield(a.client)  # nobody waits
    pool.wait(a.client)
    assert not pool.should_yield(a.client)  # a waits, but only for itself
    pool.wait(b.client)  # b is far below a, but already at its cap
    assert (a.held, b.held) == (3, 1)
    assert not pool.should_yield(a.client)


def test_should_yield_respects_weights() -> None:
    pool = LocalPermitPool("p", 4)
    heavy = Workload(pool, "heavy", weight=3.0)
    light = Workload(pool, "light", weight=1.0)
    for _ in range(3):
        assert pool.try_acquire(heavy.client)
    assert pool.try_acquire(light.client)
    pool.wait(light.client)
    heavy.flood()
    # 3 of 4 is heavy's weighted share: light (1 held) would go to 2/1 > 3/3.
    assert not pool.should_yield(heavy.client)
    assert not pool.should_yield(light.client)


def test_a_declined_grant_goes_back_to_the_pool() -> None:
    pool = LocalPermitPool("p", 2)
    a = Workload(pool, "a")
    b = Workload(pool, "b")
    a.flood()
    pool.wait(b.client)
    a.wants = False
    b.wants = False
    pool.release(a.client)
    # a's waiting state was cleared too: a released permit no longer calls it back.
    assert pool.free == 1
    assert (a.held, b.held) == (1, 0)
    assert a.grants == [] and b.grants == []
    assert a.client.grants == 0 and b.client.grants == 0
    assert pool.waiting_clients() == []
    assert not a.client.waiting and not b.client.waiting


def test_a_declined_grant_passes_to_the_next_waiter() -> None:
    pool = LocalPermitPool("p", 2)
    a = Workload(pool, "a")
    b = Workload(pool, "b")
    a.flood()
    pool.wait(b.client)
    b.wants = False  # b is chosen first (0 held) but no longer has work
    pool.release(a.client)
    assert (a.held, b.held, pool.free) == (2, 0, 0)
    assert a.grants == ["a"]
    assert pool.waiting_clients() == ["a"]


def test_invalid_sizes_and_weights_raise() -> None:
    with pytest.raises(ValueError, match="size"):
        LocalPermitPool("p", 0)
    with pytest.raises(ValueError, match="size"):
        LocalPermitPool("p", -3)
    pool = LocalPermitPool("p", 2)
    for weight in (0, -1.0):
        with pytest.raises(ValueError, match="weight"):
            pool.register("w", weight, 1, lambda: True)
    with pytest.raises(ValueError, match="concurrency"):
        pool.register("w", 1.0, 0, lambda: True)
    assert pool.clients == []
    client = pool.register("w", 1.0, 1, lambda: True)
    with pytest.raises(ValueError, match="already registered"):
        pool.register("w", 1.0, 1, lambda: True)
    assert pool.try_acquire(client)
    with pytest.raises(ValueError, match="still holds"):
        pool.unregister(client)
    pool.release(client)
    pool.unregister(client)
    assert pool.clients == []
