"""Replicas as runs: the discovery sensor keeps ``replicas`` runs per workload, each handled on its
own, and scaling never touches the replicas that stay (:mod:`orchestration.workloads.decisions`).
"""

from __future__ import annotations

from dataclasses import replace

from orchestration.workloads.decisions import SCALE_DOWN_SETTLE
from orchestration.workloads.names import REPLICA_TAG
from orchestration.workloads.registry import InvalidSpec, Registry
from tests.support.discovery_world import S, World, registry, texts, workload


def replicas_running(world: World) -> dict[int, str]:
    """Active runs by replica index (one each, or the test fails)."""
    active = [run for run in world.runs.values() if run.active]
    by_replica = {run.replica: run.run_id for run in active}
    assert len(by_replica) == len(active), active
    return by_replica


def all_started(world: World, reg: Registry) -> dict[int, str]:
    """Launch the workload's replicas, let their runs start; their run ids by replica."""
    world.tick(reg)
    world.start_all()
    world.tick(reg)
    return replicas_running(world)


def test_three_replicas_are_three_runs_with_their_index_and_own_run_keys() -> None:
    world, orders = World(), workload("orders", replicas=3)
    first = world.tick(registry(orders))
    assert [launch.tags()[REPLICA_TAG] for launch in first.launches] == ["0", "1", "2"]
    assert [launch.run_key for launch in first.launches] == [
        f"orders:{orders.hash}:1",
        f"orders#1:{orders.hash}:1",
        f"orders#2:{orders.hash}:1",
    ]
    assert first.add_partitions == ("orders",)  # one partition for all of them
    world.start_all()
    steady = world.tick(registry(orders))
    assert (steady.launches, steady.cancels) == ((), ())
    assert steady.summary == "workloads: 3 running"
    assert sorted(replicas_running(world)) == [0, 1, 2]


def test_scaling_down_stops_only_the_surplus_replicas_and_up_again_never_reuses_a_run_key() -> None:
    world = World()
    three = registry(workload("orders", replicas=3))
    before = all_started(world, three)

    one = registry(workload("orders", replicas=1))
    assert three.workloads["orders"].hash == one.workloads["orders"].hash  # not a spec change
    # One at a time, highest first: the next only once the previous one has ended.
    down = world.tick(one)
    assert [(c.run_id, c.reason) for c in down.cancels] == [(before[2], "scaled_down")]
    assert down.launches == ()
    assert world.tick(one).cancels == ()  # replica 2 still draining: replica 1 waits
    world.set(before[2], S.CANCELED, "scaled_down")
    assert world.tick(one).cancels == ()  # it just ended: the group is still rebalancing
    world.now += SCALE_DOWN_SETTLE
    second = world.tick(one)
    assert [(c.run_id, c.reason) for c in second.cancels] == [(before[1], "scaled_down")]
    world.set(before[1], S.CANCELED, "scaled_down")
    settled = world.tick(one)
    assert (settled.launches, settled.cancels) == ((), ())
    assert settled.summary == "workloads: 1 running, 1 scaled down"
    assert world.tick(one).summary == "workloads: 1 running"
    assert replicas_running(world) == {0: before[0]}  # replica 0 never touched
    assert set(world.state.workloads) == {"orders"}
    assert world.state.retired == {"orders#1": 1, "orders#2": 1}
    assert "stopped outside the sensor" not in texts(settled)

    up = world.tick(three)
    assert [(launch.replica, launch.generation) for launch in up.launches] == [(1, 2), (2, 2)]
    world.start_all()
    world.tick(three)
    after = replicas_running(world)
    assert after[0] == before[0] and len(after) == 3


def test_a_person_stopping_one_replica_stops_that_replica_only_until_they_re_execute_it() -> None:
    world, reg = World(), registry(workload("orders", replicas=2))
    runs = all_started(world, reg)
    world.set(runs[1], S.CANCELED)  # Terminate in the UI
    stopped = world.tick(reg)
    assert stopped.launches == ()
    assert f"re-executes run {runs[1]}" in texts(stopped, "warning")
    for _ in range(3):
        world.now += 600
        assert world.tick(reg).launches == ()
    assert replicas_running(world) == {0: runs[0]}

    # A re-execution copies the parent's tags, replica included: it resumes replica 1.
    rerun = world.add_run("orders", S.STARTED)
    world.runs[rerun] = replace(world.runs[rerun], replica=1)
    resumed = world.tick(reg)
    assert (resumed.launches, resumed.cancels) == ((), ())
    assert replicas_running(world) == {0: runs[0], 1: rerun}


def test_a_crashed_replica_restarts_alone_after_its_backoff() -> None:
    world, reg = World(), registry(workload("orders", replicas=3))
    runs = all_started(world, reg)
    world.set(runs[2], S.FAILURE)
    crashed = world.tick(reg)
    assert crashed.launches == ()
    assert "orders#2: run" in texts(crashed, "warning")
    world.now += 5
    restart = world.tick(reg)
    assert [(launch.replica, launch.restarts) for launch in restart.launches] == [(2, 1)]
    assert restart.cancels == ()


def test_wanted_overrides_the_spec_count_and_a_removed_workload_stops_every_replica() -> None:
    world, reg = World(), registry(workload("orders", replicas={"min": 1, "max": 4}))
    first = world.tick(reg, wanted={"orders": 2})
    assert [launch.replica for launch in first.launches] == [0, 1]
    world.start_all()
    world.tick(reg, wanted={"orders": 2})
    gone = world.tick(registry())
    assert sorted(cancel.reason for cancel in gone.cancels) == ["removed", "removed"]
    for cancel in gone.cancels:
        world.set(cancel.run_id, S.CANCELED, "removed")
    final = world.tick(registry())
    assert final.delete_partitions == ("orders",)
    assert world.state.workloads == {}


def test_disabling_a_replicated_workload_stops_every_replica_and_leaves_one_entry() -> None:
    world = World()
    world.tick(registry(workload("orders", replicas=3)))
    world.start_all()
    world.tick(registry(workload("orders", replicas=3)))
    off = registry(workload("orders", replicas=3, enabled=False))
    stopped = world.tick(off)
    assert sorted(c.reason for c in stopped.cancels) == ["disabled"] * 3
    for cancel in stopped.cancels:
        world.set(cancel.run_id, S.CANCELED, "disabled")
    world.tick(off)
    assert world.tick(off).summary == "workloads: 1 disabled"


def test_a_replicated_workload_whose_spec_turns_invalid_is_held_with_every_replica() -> None:
    world, reg = World(), registry(workload("orders", replicas=3))
    runs = all_started(world, reg)
    broken = InvalidSpec("/specs/orders.yaml", "concurrency", "not a number")
    for _ in range(3):
        held = world.tick(registry(invalid=(broken,)))
        assert (held.launches, held.cancels, held.delete_partitions) == ((), (), ())
    assert replicas_running(world) == runs
