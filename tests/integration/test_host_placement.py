"""Host runs in the discovery sensor's ticks, on a real instance (:mod:`tests.support.sensor_platform`):
hostable workloads share host runs within the budget, adding or removing workloads changes only
the members the hosts read (no host run or neighbour restarted), an emptied host is stopped, a
crashed host restarts after the backoff, a host a person terminated stays stopped, a workload
moving into a host has its own run stopped, and a person stops and starts one workload (hosted
or not) without touching its neighbours."""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from pathlib import Path

import pytest
from dagster import DagsterInstance, DagsterRun, RunsFilter, instance_for_test

from orchestration.workloads.discovery_model import DiscoveryState
from orchestration.workloads.heartbeat import write_heartbeat
from orchestration.workloads.host_store import MemberStatus, read_members, write_status
from orchestration.workloads.names import (
    CONSUMER_JOB_NAME,
    HOST_JOB_NAME,
    STOP_REASON_TAG,
    WORKLOAD_TAG,
)
from orchestration.workloads.status import collect_statuses
from orchestration.workloads.stop_jobs import start_workload_job, stop_workload_job
from tests.support.sensor_platform import POLICY, Platform, S

pytestmark = pytest.mark.integration


@pytest.fixture
def instance(tmp_path: Path) -> Iterator[DagsterInstance]:
    (tmp_path / "home").mkdir()
    with instance_for_test(temp_dir=str(tmp_path / "home")) as instance:
        yield instance


@pytest.fixture
def directory(tmp_path: Path) -> Path:
    path = tmp_path / "workloads"
    path.mkdir()
    return path


def host_runs(instance: DagsterInstance) -> list[DagsterRun]:
    """Every host run, newest first."""
    return list(instance.get_runs(RunsFilter(job_name=HOST_JOB_NAME)))


def own_runs(instance: DagsterInstance) -> list[DagsterRun]:
    return list(instance.get_runs(RunsFilter(job_name=CONSUMER_JOB_NAME)))


def members(platform: Platform, host: str) -> set[str]:
    return set(read_members(platform.instance, host) or {})


def test_workloads_share_hosts_and_arrivals_and_departures_restart_nothing(
    instance: DagsterInstance, directory: Path
) -> None:
    platform = Platform(instance, directory, host_budget=2)
    for name in ("a", "b", "c"):
        platform.write(name)
    platform.write("own", extra="run: own\n")
    platform.write("wide", replicas=2)
    platform.tick()

    hosts = {run.tags[WORKLOAD_TAG]: run for run in host_runs(instance)}
    assert set(hosts) == {"host.0", "host.1"}
    assert (members(platform, "host.0"), members(platform, "host.1")) == ({"a", "b"}, {"c"})
    # Only what asks for a run of its own (or needs several) gets consumer runs.
    assert sorted(run.tags[WORKLOAD_TAG] for run in own_runs(instance)) == ["own", "wide", "wide"]
    assert "3 hosted on 2 host run(s)" in platform.log_text()

    platform.write("d")
    (directory / "a.yaml").unlink()
    platform.now += 10
    platform.tick()
    # d fills the room a left (the tie between two hosts of one goes to the lower number).
    assert (members(platform, "host.0"), members(platform, "host.1")) == ({"b", "d"}, {"c"})
    # The hosts pick the change up at runtime: no host run was stopped or launched.
    assert {run.run_id for run in host_runs(instance)} == {r.run_id for r in hosts.values()}
    assert {run.status for run in host_runs(instance)} == {S.STARTED}

    for name in ("b", "d"):
        (directory / f"{name}.yaml").unlink()
    platform.now += 10
    platform.tick()
    assert members(platform, "host.0") == set()
    emptied = instance.get_run_by_id(hosts["host.0"].run_id)
    assert emptied is not None and emptied.status == S.CANCELING
    assert emptied.tags[STOP_REASON_TAG] == "removed"
    platform.finish(emptied)
    platform.now += 60
    platform.tick()
    assert len(host_runs(instance)) == 2  # an empty host is not started again


def test_a_removed_hosted_workload_leaves_the_catalog_once_its_host_drained_it(
    instance: DagsterInstance, directory: Path
) -> None:
    """Its host writes its last report while it drains it: wiping its page before would bring
    the page back with that report."""
    platform = Platform(instance, directory, host_budget=5)
    for name in ("a", "b"):
        platform.write(name)
    platform.tick()
    [host] = host_runs(instance)
    for name in ("a", "b"):
        write_status(
            instance, name, MemberStatus(host="host.0", run_id=host.run_id, state="running")
        )
    (directory / "a.yaml").unlink()
    platform.now += 10
    platform.tick()
    assert members(platform, "host.0") == {"b"}
    assert platform.partitions() == {"a", "b"}, "removed while its host still runs it"
    assert "kept in the catalog until their host drained them: a" in platform.log_text()
    write_status(instance, "a", MemberStatus(host="host.0", run_id=host.run_id, state="stopped"))
    platform.now += 10
    platform.tick()
    assert platform.partitions() == {"b"}
    assert "removed from the catalog: a" in platform.log_text()

    # A host run that ends without a word about a removed member holds nothing.
    (directory / "b.yaml").unlink()
    platform.now += 10
    platform.tick()
    assert platform.partitions() == {"b"}
    platform.finish(host)
    platform.now += 10
    platform.tick()
    assert platform.partitions() == set()


def test_a_crashed_host_restarts_after_backoff_and_a_person_stop_holds(
    instance: DagsterInstance, directory: Path
) -> None:
    platform = Platform(instance, directory, host_budget=5)
    platform.write("a")
    platform.write("b")
    platform.tick()
    [first] = host_runs(instance)
    instance.report_run_failed(first)
    platform.now += 1
    platform.tick()
    assert len(host_runs(instance)) == 1  # within the backoff
    platform.now += POLICY.base_backoff
    platform.tick()
    second, _ = host_runs(instance)
    assert second.run_id != first.run_id and second.status == S.STARTED
    assert members(platform, "host.0") == {"a", "b"}

    platform.terminate_from_ui(second)  # the host's stop: it drains and ends SUCCESS
    platform.now += 60
    platform.tick()
    assert "stays stopped" in platform.log_text()
    for _ in range(2):
        platform.now += 60
        platform.tick()
    assert len(host_runs(instance)) == 2


def test_a_workload_moving_into_a_host_has_its_own_run_stopped(
    instance: DagsterInstance, directory: Path
) -> None:
    before = Platform(instance, directory)  # host runs off
    before.write("a")
    before.tick()
    [own] = own_runs(instance)
    assert host_runs(instance) == []

    after = Platform(instance, directory, now=before.now + 10, cursor=before.cursor, host_budget=3)
    after.tick()
    stopping = instance.get_run_by_id(own.run_id)
    assert stopping is not None and stopping.status == S.CANCELING
    [host] = host_runs(instance)
    assert members(after, "host.0") == {"a"} and host.status == S.STARTED
    after.finish(stopping)
    after.now += 60
    after.tick()
    assert len(own_runs(instance)) == 1  # not started again beside its host


def test_a_person_stops_and_starts_one_workload_wherever_it_runs(
    instance: DagsterInstance, directory: Path
) -> None:
    platform = Platform(instance, directory, host_budget=5)
    for name in ("a", "b"):
        platform.write(name)
    platform.write("own", extra="run: own\n")
    platform.tick()
    [host] = host_runs(instance)
    [own] = own_runs(instance)

    for name in ("a", "own"):
        assert stop_workload_job.execute_in_process(partition_key=name, instance=instance).success
    platform.now += 10
    platform.tick()
    assert members(platform, "host.0") == {"b"}  # a leaves its host, b is untouched
    assert "stopped by a person with stop_workload: a, own" in platform.log_text()
    assert platform.status("a") == platform.status("own") == "stopped by a person"
    stopping = instance.get_run_by_id(own.run_id)
    assert stopping is not None and stopping.status == S.CANCELING
    platform.finish(stopping)
    for _ in range(2):
        platform.now += 60
        platform.tick()
    assert len(own_runs(instance)) == 1 and members(platform, "host.0") == {"b"}
    assert [run.run_id for run in host_runs(instance)] == [host.run_id]

    for name in ("a", "own"):
        assert start_workload_job.execute_in_process(partition_key=name, instance=instance).success
    platform.now += 10
    platform.tick()
    assert members(platform, "host.0") == {"a", "b"}
    assert len(own_runs(instance)) == 2 and own_runs(instance)[0].status == S.STARTED


@pytest.mark.parametrize("let_go", ["drained", "host ended"])
def test_a_hosted_workload_stopped_by_a_person_is_stopping_until_its_host_drained_it(
    instance: DagsterInstance, directory: Path, let_go: str
) -> None:
    """The host's last report of a workload it drains says "stopping": the sensor's figures of
    the stopped workload (the broker's lag) must come after it, not before. A host run that
    ended without saying so does not hold it "stopping"."""
    platform = Platform(instance, directory, host_budget=5)
    for name in ("a", "b"):
        platform.write(name)
    platform.tick()
    [host] = host_runs(instance)
    running = MemberStatus(host="host.0", run_id=host.run_id, state="running")
    write_status(instance, "a", running)
    assert stop_workload_job.execute_in_process(partition_key="a", instance=instance).success
    platform.now += 10
    platform.tick()
    assert members(platform, "host.0") == {"b"}
    assert platform.status("a") == "stopping"  # the host has not dropped it yet
    platform.now += 2
    platform.tick()
    assert platform.status("a") == "stopping"
    if let_go == "drained":
        write_status(instance, "a", running.model_copy(update={"state": "stopped"}))
    else:
        platform.finish(host)  # its member state still says running
    platform.now += 2
    platform.tick()
    assert platform.status("a") == "stopped by a person"
    assert platform.observed("a", "lag_from")["lag_from"] == "broker"


def test_lanehouse_workloads_shows_a_hosted_workload_as_its_host_reports_it(
    instance: DagsterInstance, directory: Path
) -> None:
    platform = Platform(instance, directory, host_budget=5)
    for name in ("a", "b", "c"):
        platform.write(name)
    platform.tick()
    [host] = host_runs(instance)
    write_status(instance, "a", MemberStatus(host="host.0", run_id=host.run_id, state="running"))
    failed = MemberStatus(
        host="host.0", run_id=host.run_id, state="waiting", error="BrokerError: gone", failures=2
    )
    write_status(instance, "b", failed)
    assert stop_workload_job.execute_in_process(partition_key="c", instance=instance).success
    platform.now += 10
    platform.tick()

    cursor = DiscoveryState.from_cursor(platform.cursor)
    statuses = {
        s.name: s
        for s in collect_statuses(
            instance, directory, cursor=cursor, measure=lambda _: platform.lag
        )
    }
    assert (statuses["a"].phase, statuses["a"].replicas_running) == ("running", 1)
    assert statuses["a"].note == f"in host run host.0 ({host.run_id})"
    # Its run and heartbeat are its host's (the host run beats under the host's name).
    write_heartbeat(instance, "host.0", host.run_id, 1)
    [a] = collect_statuses(
        instance, directory, ["a"], cursor=cursor, measure=lambda _: platform.lag
    )
    assert a.run is not None and (a.run.run_id, a.run.status) == (host.run_id, "STARTED")
    assert a.heartbeat_age is not None and 0 <= a.heartbeat_age < 60
    assert statuses["b"].phase == "waiting"
    assert "failure 2: BrokerError: gone" in (statuses["b"].note or "")
    assert statuses["c"].phase == "stopped" and "start_workload" in (statuses["c"].note or "")

    # Its host ended without a word about its members: they are not shown running.
    instance.report_run_canceled(host)
    [a] = collect_statuses(
        instance, directory, ["a"], cursor=cursor, measure=lambda _: platform.lag
    )
    assert (a.phase, a.note) == ("stopped", f"its host run host.0 ({host.run_id}) ended: CANCELED")
    assert a.run is not None and a.run.status == "CANCELED"


def test_a_new_host_is_written_beside_existing_ones(
    instance: DagsterInstance, directory: Path
) -> None:
    """Dagster's key-value write drops new keys written together with an existing one."""
    platform = Platform(instance, directory, host_budget=1)
    platform.write("a")
    platform.tick()
    for name in ("b", "c"):
        platform.write(name)
    platform.now += 10
    platform.tick()
    assert [members(platform, f"host.{i}") for i in range(3)] == [{"a"}, {"b"}, {"c"}]


def test_a_tick_writes_only_the_hosts_whose_members_changed(
    instance: DagsterInstance, directory: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """201 workloads on 5 hosts were 5 key-value writes a tick, every 10 s, changed or not."""
    platform = Platform(instance, directory, host_budget=2)
    for name in ("a", "b", "c"):
        platform.write(name)
    storage = instance.run_storage
    written: list[str] = []
    real = storage.set_cursor_values

    def recording(pairs: Mapping[str, str]) -> None:
        written.extend(key for key in pairs if key.startswith("lanehouse/host/"))
        real(pairs)

    monkeypatch.setattr(storage, "set_cursor_values", recording)
    platform.tick()
    assert sorted(written) == ["lanehouse/host/host.0", "lanehouse/host/host.1"]
    written.clear()
    platform.now += 10
    platform.tick()
    assert written == []
    platform.write("d")  # joins host.1, the one with room
    platform.now += 10
    platform.tick()
    assert written == ["lanehouse/host/host.1"]
    assert members(platform, "host.1") == {"c", "d"}
