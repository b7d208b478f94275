"""A workload's checks from its replicas' reports, and the definitions that follow its files."""

from __future__ import annotations

import http.server
import json
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml

from consumers import WorkloadSpec, load_spec
from consumers.engine.valve import ValveWindow
from consumers.service.metrics import PartitionSnapshot, WorkloadSnapshot
from orchestration import settings
from orchestration.workloads import reload
from orchestration.workloads.assets import DEAD_LETTERS_CHECK, LAG_CHECK, PINNED_CHECK
from orchestration.workloads.health import Recorder, judge
from orchestration.workloads.registry import read_registry
from orchestration.workloads.reporting import workload_metadata
from tests.helpers import wait_until

pytestmark = pytest.mark.unit


def spec(tmp_path: Path, name: str = "clicks", **extra: Any) -> WorkloadSpec:
    data = {
        "name": name,
        "source": {"kind": "kafka", "bootstrap_servers": "127.0.0.1:9092", "topics": ["t"]},
        "handler": "tests.handlers:noop",
        **extra,
    }
    path = tmp_path / f"{name}.yaml"
    path.write_text(yaml.safe_dump(data))
    return load_spec(path, import_handler=False)


def report(**fields: object) -> dict[str, object]:
    return {"status": "running", "lag": 0, "pinned_seconds": None, "valve_used": None, **fields}


def by_name(judgements: list[Any]) -> dict[str, Any]:
    return {j.check_name: j for j in judgements}


def test_replicas_add_their_lag_and_the_worst_pin_and_valve_count(tmp_path: Path) -> None:
    workload = spec(
        tmp_path,
        checks={"lag": 100, "pinned": "60s", "dead_letters": 0.5},
        dead_letter={"topic": "dlq"},
    )
    calm = [
        report(lag=40, pinned_seconds=2.0, valve_used=0.1),
        report(lag=50, pinned_seconds=59.0, valve_used=0.2),
    ]
    assert all(j.passed for j in judge(workload, calm))
    one_more = [*calm, report(lag=11, pinned_seconds=61.0, pinned_partition=3, valve_used=0.6)]
    checks = by_name(judge(workload, one_more))
    assert not checks[LAG_CHECK].passed and checks[LAG_CHECK].metadata["lag_records"] == 101
    assert not checks[PINNED_CHECK].passed and "partition 3" in checks[PINNED_CHECK].description
    assert not checks[DEAD_LETTERS_CHECK].passed
    assert checks[DEAD_LETTERS_CHECK].severity.value == "WARN"  # the valve has not tripped yet


def test_a_lag_that_leaves_out_unread_partitions_is_red_when_over_and_never_green(
    tmp_path: Path,
) -> None:
    """A run's first report may come before every partition was fetched: 506 of 2,000 waiting
    records were counted and judged green against a target of 700."""
    workload = spec(tmp_path, checks={"lag": 700})
    unread = "not read yet: t[1], t[3]"
    assert LAG_CHECK not in by_name(judge(workload, [report(lag=506, lag_unknown=unread)]))
    over = by_name(judge(workload, [report(lag=701, lag_unknown=unread)]))[LAG_CHECK]
    assert not over.passed and over.description.startswith("at least 701 records behind")
    # Another replica's report that leaves partitions out makes the sum a lower bound too.
    replicas = [report(lag=300), report(lag=200, lag_unknown=unread)]
    assert LAG_CHECK not in by_name(judge(workload, replicas))
    assert by_name(judge(workload, [report(lag=506)]))[LAG_CHECK].passed


def test_a_report_names_the_partitions_its_lag_leaves_out() -> None:
    def part(partition: int, end: int | None, position: int | None = 10) -> PartitionSnapshot:
        lag = None if end is None or position is None else end - position
        return PartitionSnapshot("t", partition, position, end, 0, lag, None, None, None)

    def snapshot(*parts: PartitionSnapshot) -> WorkloadSnapshot:
        counters = dict.fromkeys(("completed", "failed", "dead_lettered", "parked"), 0)
        return WorkloadSnapshot("clicks", counters, 0, 0, 0, 0, 0, 0, 0, parts)

    partial = workload_metadata(
        snapshot(part(0, 500), part(1, None), part(2, None)), 0.0, "running"
    )
    assert (partial["lag"], partial["lag_unknown"]) == (490, "not read yet: t[1], t[2]")
    whole = workload_metadata(snapshot(part(0, 500), part(1, 30)), 0.0, "running")
    assert (whole["lag"], whole["lag_unknown"]) == (510, None)
    # Fetched, nothing delivered (an empty partition has no client position): not left out.
    empty = workload_metadata(snapshot(part(0, 500), part(1, 0, None)), 0.0, "running")
    assert (empty["lag"], empty["lag_unknown"]) == (490, None)


def test_a_partition_with_records_behind_it_and_no_progress_turns_the_pin_check_red(
    tmp_path: Path,
) -> None:
    workload = spec(tmp_path, checks={"pinned": "60s"})
    moving = report(lag=900, stalled_seconds=3.0, stalled_partition=2)
    assert by_name(judge(workload, [moving]))[PINNED_CHECK].passed
    stuck = report(lag=900, stalled_seconds=75.0, stalled_partition=2)
    check = by_name(judge(workload, [moving, stuck]))[PINNED_CHECK]
    assert not check.passed
    assert "partition 2" in check.description and "delivered none for 75 s" in check.description
    assert check.metadata["stalled_seconds"] == 75.0


def test_nothing_is_judged_without_a_running_report(tmp_path: Path) -> None:
    workload = spec(tmp_path)
    assert judge(workload, []) == []
    assert judge(workload, [report(status="stopped", lag=10**9)]) == []
    # No dead-letter topic: that check holds; an unknown lag is not judged.
    checks = by_name(judge(workload, [report(lag=None)]))
    assert set(checks) == {PINNED_CHECK, DEAD_LETTERS_CHECK} and checks[DEAD_LETTERS_CHECK].passed


def test_results_are_recorded_when_they_change_and_every_few_minutes(tmp_path: Path) -> None:
    workload = spec(tmp_path, checks={"lag": 10})
    recorder = Recorder()
    green, red = judge(workload, [report(lag=1)]), judge(workload, [report(lag=11)])
    assert len(recorder.due("clicks", green, 0.0)) == 3
    assert recorder.due("clicks", green, 30.0) == []
    assert [j.check_name for j in recorder.due("clicks", red, 60.0)] == [LAG_CHECK]
    assert len(recorder.due("clicks", red, 60.0 + 300)) == 3


class _Webserver(http.server.ThreadingHTTPServer):
    bodies: list[dict[str, Any]]


@pytest.fixture
def webserver() -> Iterator[_Webserver]:
    class Handler(http.server.BaseHTTPRequestHandler):
        def do_POST(self) -> None:
            length = int(self.headers["Content-Length"])
            server.bodies.append(json.loads(self.rfile.read(length)))
            reply = {"data": {"reloadRepositoryLocation": {"__typename": "WorkspaceLocationEntry"}}}
            body = json.dumps(reply).encode()
            self.send_response(200)
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, *args: object) -> None:
            pass

    server = _Webserver(("127.0.0.1", 0), Handler)
    server.bodies = []
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    yield server
    server.shutdown()


@pytest.fixture(autouse=True)
def _restore_loaded(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(reload, "_loaded", None)  # what this process's definitions were


def check(reloader: reload.Reloader, directory: Path, now: float) -> Any:
    return reloader.check(directory, read_registry(directory), now)


def test_new_removed_and_changed_workloads_ask_for_one_reload(
    tmp_path: Path, webserver: _Webserver, monkeypatch: pytest.MonkeyPatch
) -> None:
    reload.definitions_loaded(tmp_path, [spec(tmp_path, "a"), spec(tmp_path, "b")])
    assert check(reload.Reloader(), tmp_path, 0.0) is None  # files as loaded

    (tmp_path / "b.yaml").unlink()
    spec(tmp_path, "c")
    spec(tmp_path, "a", owners=["team:shop"])
    monkeypatch.setenv(settings.URL_ENV, f"http://127.0.0.1:{webserver.server_port}")
    reloader = reload.Reloader()
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    assert check(reloader, elsewhere, 0.0) is None  # not the directory the definitions read
    asked = check(reloader, tmp_path, 0.0)
    assert asked is not None and asked.text == (
        "workload files changed (added c; removed b; changed a): reloading code location "
        "'lanehouse'"
    )
    wait_until(lambda: webserver.bodies, 10, message="the reload mutation")
    assert webserver.bodies[0]["variables"] == {"location": "lanehouse"}
    assert "reloadRepositoryLocation" in webserver.bodies[0]["query"]
    # Not again while the same difference waits for the reload; again after a minute.
    waiting = check(reloader, tmp_path, 30.0)
    assert waiting is not None and "waiting for it" in waiting.text
    assert check(reloader, tmp_path, 61.0) is not None
    wait_until(lambda: len(webserver.bodies) == 2, 10, message="asked again")


def test_the_reload_names_the_location_the_tick_reports(
    tmp_path: Path, webserver: _Webserver, monkeypatch: pytest.MonkeyPatch
) -> None:
    """In a team's project the location is the project's name, not ``lanehouse``: the tick's
    own location wins over ``LANEHOUSE_CODE_LOCATION``."""
    reload.definitions_loaded(tmp_path, [spec(tmp_path, "a")])
    spec(tmp_path, "b")
    monkeypatch.setenv(settings.URL_ENV, f"http://127.0.0.1:{webserver.server_port}")
    monkeypatch.setenv(reload.LOCATION_ENV, "from_env")
    asked = reload.Reloader().check(tmp_path, read_registry(tmp_path), 0.0, "audit_project")
    assert asked is not None and asked.text.endswith("reloading code location 'audit_project'")
    wait_until(lambda: webserver.bodies, 10, message="the reload mutation")
    assert webserver.bodies[0]["variables"] == {"location": "audit_project"}


def test_an_invalid_file_keeps_its_definitions_and_no_url_means_a_warning(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    reload.definitions_loaded(tmp_path, [spec(tmp_path, "a"), spec(tmp_path, "b")])
    (tmp_path / "b.yaml").write_text("name: b\nsource: {kind: kafka}\n")  # held, not removed
    assert check(reload.Reloader(), tmp_path, 0.0) is None
    monkeypatch.delenv(settings.URL_ENV, raising=False)
    spec(tmp_path, "c")
    warned = check(reload.Reloader(), tmp_path, 0.0)
    assert warned is not None and warned.level == "warning"
    assert "added c" in warned.text and settings.URL_ENV in warned.text


def test_the_valve_share_reaches_one_where_the_next_dead_letter_stops_the_workload() -> None:
    valve = ValveWindow(window=5, max_ratio=0.5)  # 2.5 allowed: 2 can be held
    valve.count(True)
    assert not valve.would_trip() and valve.used == 0.5
    valve.count(True)
    assert valve.would_trip() and valve.used == 1.0
