"""The discovery sensor's decisions, tick by tick, against a small model of run storage
(:class:`tests.support.discovery_world.World`), with no Dagster instance.
"""

from __future__ import annotations

import pytest

from orchestration.workloads.decisions import Decision, tracked_run_ids
from orchestration.workloads.discovery_model import (
    CRASH_LOOP_TAG,
    HEARTBEAT_TIMEOUT_ENV,
    RESTARTS_TAG,
    DiscoveryState,
    RestartPolicy,
    policy_from_env,
)
from orchestration.workloads.names import (
    GENERATION_TAG,
    REPLICA_TAG,
    SPEC_HASH_TAG,
    WORKLOAD_TAG,
)
from orchestration.workloads.registry import InvalidSpec, Registry
from tests.support.discovery_world import POLICY, S, World, registry, texts, workload


def test_new_workload_gets_a_partition_and_one_run_per_generation() -> None:
    world, orders = World(), workload("orders")
    first = world.tick(registry(orders))
    assert first.add_partitions == ("orders",)
    assert [launch.run_key for launch in first.launches] == [f"orders:{orders.hash}:1"]
    assert first.launches[0].tags() == {
        WORKLOAD_TAG: "orders",
        SPEC_HASH_TAG: orders.hash,
        GENERATION_TAG: "1",
        REPLICA_TAG: "0",
    }
    # Queued, then started: never a second launch while a run is active.
    assert world.tick(registry(orders)).launches == ()
    world.start_all()
    steady = world.tick(registry(orders))
    assert (steady.launches, steady.cancels, steady.add_partitions) == ((), (), ())
    assert steady.summary == "workloads: 1 running"


def test_changed_spec_stops_the_old_run_and_starts_the_new_one_only_after_it_ended() -> None:
    world, old = World(), workload("orders", concurrency=10)
    world.tick(registry(old))
    world.start_all()
    world.tick(registry(old))
    run_id = world.latest("orders").run_id
    new = workload("orders", concurrency=20)

    changed = world.tick(registry(new))
    assert [(c.run_id, c.reason) for c in changed.cancels] == [(run_id, "spec_changed")]
    assert changed.launches == ()
    # CANCELING is active: no replacement and no second signal while it drains.
    for _ in range(3):
        world.now += 30
        draining = world.tick(registry(new))
        assert (draining.launches, draining.cancels) == ((), ())
        assert "1 stopping" in draining.summary
    world.set(run_id, S.CANCELED, "spec_changed")
    after = world.tick(registry(new))
    assert [launch.run_key for launch in after.launches] == [f"orders:{new.hash}:2"]


def test_a_stop_the_state_missed_still_counts_as_the_sensors_when_the_run_was_obsolete() -> None:
    # The run ended CANCELED without a stop reason (say the tick that stopped it failed after
    # the termination): its spec is outdated anyway, so it is not a person's stop.
    world, old = World(), workload("orders", concurrency=10)
    world.tick(registry(old))
    world.start_all()
    world.tick(registry(old))
    world.set(world.latest("orders").run_id, S.CANCELED)
    decision = world.tick(registry(workload("orders", concurrency=20)))
    assert len(decision.launches) == 1


def test_removed_workload_is_stopped_then_its_partition_deleted_and_generation_kept() -> None:
    world, orders, clicks = World(), workload("orders"), workload("clicks")
    world.tick(registry(orders, clicks))
    world.start_all()
    run_id = world.latest("orders").run_id

    removed = world.tick(registry(clicks))
    assert [(c.run_id, c.reason) for c in removed.cancels] == [(run_id, "removed")]
    assert removed.delete_partitions == ()  # not while its run drains
    world.set(run_id, S.CANCELED, "removed")
    gone = world.tick(registry(clicks))
    assert gone.delete_partitions == ("orders",)
    assert "orders" not in gone.state.workloads
    assert gone.state.retired == {"orders": 1}

    # The same spec comes back: generation 2, never the used run key of generation 1.
    back = world.tick(registry(orders, clicks))
    assert back.add_partitions == ("orders",)
    assert [launch.run_key for launch in back.launches] == [f"orders:{orders.hash}:2"]
    assert back.state.retired == {}


def test_disabled_workload_is_registered_but_not_run_and_its_run_is_stopped() -> None:
    world = World()
    first = world.tick(registry(workload("orders", enabled=False)))
    assert (first.add_partitions, first.launches) == (("orders",), ())
    assert first.summary == "workloads: 1 disabled"

    world.tick(registry(workload("orders")))
    world.start_all()
    run_id = world.latest("orders").run_id
    disabled = world.tick(registry(workload("orders", enabled=False)))
    assert [(c.run_id, c.reason) for c in disabled.cancels] == [(run_id, "disabled")]
    world.set(run_id, S.CANCELED, "disabled")
    assert world.tick(registry(workload("orders", enabled=False))).launches == ()
    assert len(world.tick(registry(workload("orders"))).launches) == 1


def crash(world: World, reg: Registry) -> Decision:
    """Start whatever was launched, fail the workload's latest run, tick once."""
    world.start_all()
    world.tick(reg)
    world.set(world.latest("orders").run_id, S.FAILURE)
    return world.tick(reg)


def test_crashed_run_restarts_with_exponential_backoff_then_is_flagged_crash_looping() -> None:
    world, reg = World(), registry(workload("orders"))
    world.tick(reg)
    delays = []
    for number in range(1, 7):
        crashed = crash(world, reg)
        assert crashed.launches == ()
        assert f"{number} crash(es)" in texts(crashed, "warning")
        waited = 0.0
        while not (decision := world.tick(reg)).launches:
            assert "waiting to restart" in decision.summary
            world.now += 1
            waited += 1
        delays.append(waited)
        (launch,) = decision.launches
        assert launch.restarts == number
        assert launch.generation == number + 1
        tags = launch.tags()
        assert tags[RESTARTS_TAG] == str(number)
        assert (CRASH_LOOP_TAG in tags) == (number >= POLICY.crash_loop_threshold)
    assert delays == [5, 10, 20, 300, 300, 300]
    # Visible on every tick while it lasts: a warning and the tick's summary line.
    crash(world, reg)
    waiting = world.tick(reg)
    assert "CRASH-LOOPING: orders" in waiting.summary
    assert "orders is CRASH-LOOPING: 7 crashes" in texts(waiting, "warning")


def test_the_backoff_counts_from_the_failure_not_from_the_tick_that_saw_it() -> None:
    """Before: a crash the sensor saw 8 s late waited 5 s more from then (in practice up to a
    tick more, 10 s): kill -9 to the replacement's launch took up to 20 s, not 5."""
    world, reg = World(), registry(workload("orders"))
    world.tick(reg)
    world.start_all()
    world.tick(reg)
    world.set(world.latest("orders").run_id, S.FAILURE)  # ended now
    world.now += 8  # the next tick comes 8 s after the failure: past the 5 s backoff
    late = world.tick(reg)
    assert len(late.launches) == 1, texts(late)
    assert "restarting now (5 s after it failed)" in texts(late, "warning")

    world.start_all()
    world.tick(reg)
    world.set(world.latest("orders").run_id, S.FAILURE)
    world.now += 2  # seen 2 s after the second failure, whose backoff is 10 s
    early = world.tick(reg)
    assert early.launches == ()
    assert "restarting in 8 s (10 s after it failed)" in texts(early, "warning")
    world.now += 7.5
    assert world.tick(reg).launches == ()
    world.now += 0.5
    assert len(world.tick(reg).launches) == 1


def test_a_run_that_stays_up_clears_the_crash_history() -> None:
    world, reg = World(), registry(workload("orders"))
    world.tick(reg)
    for _ in range(3):
        crash(world, reg)
        world.now += 300
        assert len(world.tick(reg).launches) == 1
    world.start_all()
    world.tick(reg)
    world.now += POLICY.stable_after
    assert "crash history cleared" in texts(world.tick(reg))
    world.set(world.latest("orders").run_id, S.FAILURE)
    world.tick(reg)
    world.now += POLICY.base_backoff
    assert world.tick(reg).launches[0].restarts == 1


def test_crashes_outside_the_window_are_forgotten() -> None:
    world, reg = World(), registry(workload("orders"))
    world.tick(reg)
    crash(world, reg)
    world.now += POLICY.crash_window
    assert world.tick(reg).launches[0].restarts == 0


def test_a_run_a_person_terminated_stays_stopped_until_they_launch_it_again() -> None:
    world, reg = World(), registry(workload("orders"))
    world.tick(reg)
    world.start_all()
    world.tick(reg)
    world.set(world.latest("orders").run_id, S.CANCELED)  # terminated in the UI
    stopped = world.tick(reg)
    assert stopped.launches == ()
    assert "stays stopped" in texts(stopped, "warning")
    for _ in range(5):
        world.now += 600
        assert world.tick(reg).summary == "workloads: 1 stopped by a person"

    # They launch the partition from the launchpad: the sensor manages it again.
    theirs = world.add_run("orders", S.STARTED)
    resumed = world.tick(reg)
    assert (resumed.launches, resumed.cancels) == ((), ())
    assert "launched outside the sensor" in texts(resumed)
    assert resumed.summary == "workloads: 1 running"
    world.set(theirs, S.FAILURE)
    world.tick(reg)
    world.now += POLICY.base_backoff
    assert [launch.generation for launch in world.tick(reg).launches] == [2]


def test_a_stopped_workload_starts_again_when_its_spec_changes() -> None:
    world = World()
    world.tick(registry(workload("orders")))
    world.start_all()
    world.set(world.latest("orders").run_id, S.CANCELED)
    world.tick(registry(workload("orders")))
    assert len(world.tick(registry(workload("orders", concurrency=7))).launches) == 1


def test_a_consumer_run_that_succeeded_on_its_own_counts_as_stopped_by_a_person() -> None:
    # A consumer never finishes by itself: SUCCESS means someone stopped it and it drained
    # cleanly (in_process_executor without a re-raise).
    world, reg = World(), registry(workload("orders"))
    world.tick(reg)
    world.start_all()
    world.set(world.latest("orders").run_id, S.SUCCESS)
    assert world.tick(reg).summary == "workloads: 1 stopped by a person"


def test_runs_the_platform_stopped_start_again() -> None:
    world, reg = World(), registry(workload("orders"))
    world.tick(reg)
    world.start_all()
    world.set(world.latest("orders").run_id, S.CANCELED, stop_reason="platform")
    assert [launch.generation for launch in world.tick(reg).launches] == [2]


def test_a_run_a_rewind_stopped_waits_for_the_rewind_then_starts_again() -> None:
    world, reg = World(), registry(workload("orders"), workload("billing"))
    world.tick(reg)
    world.start_all()
    world.set(world.latest("orders").run_id, S.CANCELED, stop_reason="rewind")
    rewinding = frozenset({"orders"})
    for _ in range(3):
        decision = world.tick(reg, rewinding)
        assert decision.launches == ()
        assert "1 rewinding" in decision.summary
    assert [launch.generation for launch in world.tick(reg).launches] == [2]
    assert world.latest("billing").status == S.STARTED  # the other workload never stopped


def silence(world: World, reg: Registry, run_id: str) -> Decision:
    """Kill ``run_id``'s worker; tick every 10 s until the sensor gives up on it."""
    world.dead.add(run_id)
    waited = 0.0
    while not (decision := world.tick(reg)).abandons:
        assert world.runs[run_id].active
        assert waited < 2 * POLICY.heartbeat_timeout, "never abandoned"
        world.now += 10
        waited += 10
    assert waited == POLICY.heartbeat_timeout
    return decision


def test_a_run_killed_outright_is_marked_failed_and_restarted_with_backoff() -> None:
    world, reg = World(), registry(workload("orders"))
    killed = world.running(reg)
    gone = silence(world, reg, killed)
    (abandon,) = gone.abandons
    assert (abandon.run_id, abandon.status) == (killed, S.FAILURE)
    assert "has not sent a heartbeat for 120 s" in texts(gone, "warning")
    assert "1 crash(es)" in texts(gone, "warning")
    assert world.runs[killed].status == S.FAILURE
    world.now += POLICY.base_backoff
    (launch,) = world.tick(reg).launches
    assert (launch.generation, launch.restarts) == (2, 1)


def test_a_run_killed_while_draining_for_a_spec_change_lets_the_new_spec_start() -> None:
    world = World()
    world.running(registry(workload("orders")))
    changed = registry(workload("orders", concurrency=7))
    (cancel,) = world.tick(changed).cancels
    gone = silence(world, changed, cancel.run_id)
    assert gone.abandons[0].status == S.CANCELED
    assert "crash" not in texts(gone)
    assert [launch.generation for launch in gone.launches] == [2]


def test_a_run_killed_while_a_person_terminated_it_stays_stopped() -> None:
    world, reg = World(), registry(workload("orders"))
    run_id = world.running(reg)
    world.set(run_id, S.CANCELING)  # terminate in the UI; the worker dies while draining
    gone = silence(world, reg, run_id)
    assert (gone.launches, gone.abandons[0].status) == ((), S.CANCELED)
    assert world.tick(reg).summary == "workloads: 1 stopped by a person"


def test_a_live_run_is_never_abandoned_however_far_the_sensor_clock_jumps() -> None:
    # The sensor compares heartbeats with each other, never with its clock: a sensor that was
    # off for an hour, or a worker whose clock is wrong, does not make a live run look dead.
    world, reg = World(), registry(workload("orders"))
    world.tick(reg)
    world.start_all()
    for _ in range(5):
        world.now += 3600
        decision = world.tick(reg)
        assert (decision.abandons, decision.summary) == ((), "workloads: 1 running")


def test_a_run_that_never_beats_is_abandoned_a_timeout_after_it_was_first_seen() -> None:
    world, reg = World(), registry(workload("orders"))
    world.tick(reg)
    run_id = world.latest("orders").run_id
    world.dead.add(run_id)  # died before its first beat
    world.start_all()
    assert silence(world, reg, run_id).abandons[0].status == S.FAILURE


def test_invalid_spec_is_reported_and_does_not_touch_other_workloads() -> None:
    world, orders = World(), workload("orders")
    world.tick(registry(orders))
    world.start_all()
    bad = InvalidSpec("/specs/new.yaml", "source.topics", "at least one topic is required", "new")
    decision = world.tick(registry(orders, invalid=(bad,)))
    assert (decision.launches, decision.cancels, decision.delete_partitions) == ((), (), ())
    assert decision.add_partitions == ()
    assert texts(decision, "error") == (
        "invalid spec /specs/new.yaml: source.topics: at least one topic is required"
    )
    assert decision.summary == "workloads: 1 running; 1 invalid spec file(s), see the tick log"
    assert "new" not in decision.state.workloads


def test_running_workload_whose_spec_turns_invalid_is_held_as_it_is() -> None:
    world, orders = World(), workload("orders")
    world.tick(registry(orders))
    world.start_all()
    run_id = world.latest("orders").run_id
    # The file no longer parses: only its path says which workload it was.
    broken = InvalidSpec(orders.file, "", "invalid YAML at line 3, column 1: ...")
    for _ in range(3):
        held = world.tick(registry(invalid=(broken,)))
        assert (held.cancels, held.launches, held.delete_partitions) == ((), (), ())
        assert held.summary.startswith("workloads: 1 held (invalid spec)")
    # A crash while held is counted but nothing restarts an invalid spec, however long.
    world.set(run_id, S.FAILURE)
    world.now += 1
    held = world.tick(registry(invalid=(broken,)))
    assert held.launches == ()
    assert "not restarted while its spec is invalid" in texts(held)
    world.now += 3600
    assert world.tick(registry(invalid=(broken,))).launches == ()
    # Fixed (same content): restarted at once, the backoff it earned long past.
    fixed = world.tick(registry(orders))
    assert [launch.generation for launch in fixed.launches] == [2]


def test_two_files_naming_one_workload_hold_it() -> None:
    world, orders = World(), workload("orders")
    world.tick(registry(orders))
    world.start_all()
    duplicate = (
        InvalidSpec(
            "/specs/a.yaml", "name", "workload name 'orders' is also declared in b", "orders"
        ),
        InvalidSpec(
            "/specs/b.yaml", "name", "workload name 'orders' is also declared in a", "orders"
        ),
    )
    decision = world.tick(registry(invalid=duplicate))
    assert (decision.cancels, decision.launches, decision.delete_partitions) == ((), (), ())
    assert len([m for m in decision.messages if m.level == "error"]) == 2


def test_older_duplicate_run_is_superseded_by_a_newer_one() -> None:
    world, reg = World(), registry(workload("orders"))
    world.tick(reg)
    world.start_all()
    ours = world.latest("orders").run_id
    world.add_run("orders", S.STARTED)  # someone launched a second one
    decision = world.tick(reg)
    assert [(c.run_id, c.reason) for c in decision.cancels] == [(ours, "superseded")]


def test_queued_runs_are_stopped_too_and_only_once_while_canceling() -> None:
    world = World()
    world.tick(registry(workload("orders")))
    run_id = world.latest("orders").run_id
    decision = world.tick(registry(workload("orders", enabled=False)))
    assert [c.run_id for c in decision.cancels] == [run_id]
    assert world.runs[run_id].status == S.CANCELED
    assert world.tick(registry(workload("orders", enabled=False))).cancels == ()


def test_a_requested_run_that_never_appears_is_requested_again_with_a_new_key() -> None:
    world, orders = World(), workload("orders")
    world.used_keys.add(f"orders:{orders.hash}:1")  # e.g. a cursor reset: key already used
    first = world.tick(registry(orders))
    assert [launch.generation for launch in first.launches] == [1]
    world.now += POLICY.launch_timeout - 1
    assert world.tick(registry(orders)).launches == ()
    world.now += 1
    again = world.tick(registry(orders))
    assert [launch.generation for launch in again.launches] == [2]
    assert "has not appeared" in texts(again, "warning")


def test_a_fresh_cursor_continues_generations_from_the_run_tags() -> None:
    world, orders = World(), workload("orders")
    world.add_run("orders", S.CANCELED, True, 7, orders.hash)  # stopped by the platform
    world.set("run-1", S.CANCELED, stop_reason="platform")
    decision = world.tick(registry(orders))
    assert [launch.generation for launch in decision.launches] == [8]


def test_a_run_deleted_from_storage_is_treated_as_ended() -> None:
    world, reg = World(), registry(workload("orders"))
    world.tick(reg)
    world.start_all()
    world.tick(reg)
    run_id = world.latest("orders").run_id
    assert tracked_run_ids(world.state) == {run_id}
    del world.runs[run_id]
    decision = world.tick(reg)
    assert "gone from run storage" in texts(decision, "warning")
    assert [launch.generation for launch in decision.launches] == [2]


def test_runs_of_an_unknown_workload_are_stopped_and_stray_partitions_deleted() -> None:
    world = World()
    world.partitions = {"ghost"}
    stray = world.add_run("ghost", S.STARTED)
    decision = world.tick(registry())
    assert [(c.run_id, c.reason) for c in decision.cancels] == [(stray, "removed")]
    world.set(stray, S.CANCELED, "removed")
    assert world.tick(registry()).delete_partitions == ("ghost",)


def test_each_run_end_is_handled_once_however_often_it_is_seen() -> None:
    world, reg = World(), registry(workload("orders"))
    world.tick(reg)
    crash(world, reg)
    for _ in range(10):  # the same FAILURE, seen again on every tick
        world.tick(reg)
    assert len(world.state.workloads["orders"].crashes) == 1


def test_cursor_round_trip_and_unreadable_cursor() -> None:
    world, reg = World(), registry(workload("orders"), workload("clicks"))
    world.tick(reg)
    state = world.tick(reg).state
    assert DiscoveryState.from_cursor(state.to_cursor()) == state
    assert DiscoveryState.from_cursor(None) == DiscoveryState()
    with pytest.raises(ValueError, match="not readable"):
        DiscoveryState.from_cursor('{"workloads": 3}')
    with pytest.raises(ValueError, match="version 99"):
        DiscoveryState.from_cursor('{"version": 99}')


def test_restart_policy() -> None:
    policy = RestartPolicy(base_backoff=5, max_backoff=60, crash_loop_threshold=10)
    assert [policy.delay(n) for n in range(1, 12)] == [5, 10, 20, 40, 60, 60, 60, 60, 60, 60, 60]
    with pytest.raises(ValueError, match="base_backoff"):
        RestartPolicy(base_backoff=10, max_backoff=5)
    with pytest.raises(ValueError, match="threshold"):
        RestartPolicy(crash_loop_threshold=0)


def test_heartbeat_timeout_from_the_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv(HEARTBEAT_TIMEOUT_ENV, raising=False)
    assert policy_from_env().heartbeat_timeout == RestartPolicy().heartbeat_timeout
    monkeypatch.setenv(HEARTBEAT_TIMEOUT_ENV, "45")
    assert policy_from_env().heartbeat_timeout == 45
    for bad in ("soon", "5", "nan", "-30"):
        monkeypatch.setenv(HEARTBEAT_TIMEOUT_ENV, bad)
        with pytest.raises(ValueError, match=f"{HEARTBEAT_TIMEOUT_ENV}='{bad}': expected seconds"):
            policy_from_env()
