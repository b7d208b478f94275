"""`lanehouse consume --replicas N`: validation, the children's command lines, and the
supervisor (signal forwarding, fail-fast, exit status, no orphans) on stand-in children.

The stand-in child (CHILD) writes ``ready-I`` once its handlers are installed, then: ``exit:N``
exits N at once; ``drain`` exits 0 on the first signal; ``stubborn`` writes ``draining-I`` on
the first signal and exits 130 on the second. Every signal it gets is printed.
"""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import sys
import threading
from collections.abc import Callable, Sequence
from pathlib import Path

import pytest
from typer.testing import CliRunner

from orchestration.cli import app
from orchestration.local import replicas
from tests.helpers import wait_until

pytestmark = pytest.mark.timeout(60)  # a supervisor that fails to stop its children hangs

WIDE = {"COLUMNS": "200", "NO_COLOR": "1"}
REPO = Path(__file__).resolve().parents[2]

CHILD = r"""
import os, signal, sys, time
from pathlib import Path
where, mode = Path(sys.argv[1]), sys.argv[2]
me = os.environ["LANEHOUSE_REPLICA"]
got = []
def on_signal(signum, frame):
    got.append(signum)
    print(f"got {signal.Signals(signum).name}", flush=True)
    if mode == "stubborn" and len(got) == 1:
        (where / f"draining-{me}").write_text("")
for sig in (signal.SIGINT, signal.SIGTERM):
    signal.signal(sig, on_signal)
print(f"replica {me} of {os.environ['LANEHOUSE_REPLICAS']}, own group {os.getpgrp() == os.getpid()}")
print("to stderr", file=sys.stderr)
(where / f"pid-{me}").write_text(str(os.getpid()))
(where / f"pid-{me}").rename(where / f"ready-{me}")  # whole, never half-written
if mode.startswith("exit:"):
    sys.exit(int(mode[5:]))
deadline = time.monotonic() + 60  # a stand-in never outlives a broken test for long
while len(got) < (2 if mode == "stubborn" else 1) and time.monotonic() < deadline:
    time.sleep(0.01)
sys.exit(130 if mode == "stubborn" else 0)
"""


def children(where: Path, *modes: str) -> list[list[str]]:
    return [[sys.executable, "-c", CHILD, str(where), mode] for mode in modes]


def ready(where: Path, count: int) -> list[int]:
    """The pids of the stand-ins, once ``count`` of them installed their handlers."""
    wait_until(lambda: len(list(where.glob("ready-*"))) == count, timeout=30)
    return [int(p.read_text()) for p in sorted(where.glob("ready-*"))]


def in_background(action: Callable[[], None]) -> threading.Thread:
    thread = threading.Thread(target=action, daemon=True)
    thread.start()
    return thread


def test_every_child_output_line_is_prefixed(
    tmp_path: Path, capfd: pytest.CaptureFixture[str]
) -> None:
    assert replicas.supervise(children(tmp_path, "exit:0", "exit:0", "exit:0")) == 0
    out, err = capfd.readouterr()
    for i in range(3):
        assert f"[replica {i}] replica {i} of 3, own group True\n" in out
        assert f"[replica {i}] to stderr\n" in err
    assert "error:" not in err


def test_the_failed_replica_status_is_the_exit_status(
    tmp_path: Path, capfd: pytest.CaptureFixture[str]
) -> None:
    """Not 143 from a replica that the stop reached before it handled signals."""
    assert replicas.supervise(children(tmp_path, "drain", "exit:3", "drain")) == 3
    _, err = capfd.readouterr()
    assert "error: replica 1 (pid " in err and ") exited with status 3;" in err


def test_a_signal_is_forwarded_to_every_child_and_a_drain_exits_0(
    tmp_path: Path, capfd: pytest.CaptureFixture[str]
) -> None:
    def interrupt() -> None:
        ready(tmp_path, 2)
        os.kill(os.getpid(), signal.SIGINT)

    thread = in_background(interrupt)
    assert replicas.supervise(children(tmp_path, "drain", "drain")) == 0
    thread.join()
    out, _ = capfd.readouterr()
    for i in range(2):
        assert out.count(f"[replica {i}] got SIGINT") == 1, out


def test_a_second_signal_is_forwarded_again_so_children_exit_at_once(
    tmp_path: Path, capfd: pytest.CaptureFixture[str]
) -> None:
    def twice() -> None:
        ready(tmp_path, 2)
        os.kill(os.getpid(), signal.SIGTERM)
        wait_until(lambda: len(list(tmp_path.glob("draining-*"))) == 2, timeout=30)
        os.kill(os.getpid(), signal.SIGTERM)

    thread = in_background(twice)
    assert replicas.supervise(children(tmp_path, "stubborn", "stubborn")) == 130
    thread.join()
    out, _ = capfd.readouterr()
    for i in range(2):
        assert out.count(f"[replica {i}] got SIGTERM") == 2, out


def test_a_failed_replica_stops_the_others_gracefully(
    tmp_path: Path, capfd: pytest.CaptureFixture[str]
) -> None:
    def fail_one() -> None:
        pids = ready(tmp_path, 3)
        os.kill(pids[1], signal.SIGKILL)

    thread = in_background(fail_one)
    status = replicas.supervise(children(tmp_path, "drain", "drain", "drain"))
    thread.join()
    assert status == 128 + signal.SIGKILL
    out, err = capfd.readouterr()
    assert ") was killed by SIGKILL; stopping the other replicas" in err
    assert "error: replica 1 (pid " in err
    assert out.count("got SIGTERM") == 2, out  # one graceful stop for each survivor
    assert "[replica 1] got" not in out


def test_children_get_sigterm_when_the_supervisor_is_killed(tmp_path: Path) -> None:
    code = (
        "import sys; from orchestration.local.replicas import supervise; "
        f"supervise({children(tmp_path, 'drain', 'drain')!r})"
    )
    supervisor = subprocess.Popen(
        [sys.executable, "-c", code], cwd=REPO, env={**os.environ, "PYTHONPATH": str(REPO)}
    )
    try:
        pids = ready(tmp_path, 2)
    finally:
        supervisor.kill()
        supervisor.wait()

    def gone(pid: int) -> bool:
        try:
            os.kill(pid, 0)
        except ProcessLookupError:
            return True
        # Not reaped yet (its new parent reaps it): a zombie counts as gone.
        return Path(f"/proc/{pid}/stat").read_text().split(") ")[1].startswith("Z")

    try:
        wait_until(lambda: all(gone(pid) for pid in pids), timeout=20, message="children exited")
    finally:
        for pid in pids:
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGKILL)


# ------------------------------------------------------------------- the command line


def kafka_spec(path: Path, name: str = "orders") -> Path:
    path.write_text(
        f"name: {name}\n"
        "source: {kind: kafka, bootstrap_servers: '127.0.0.1:1', topics: [orders], group: g}\n"
        "handler: consumers.dev.examples:enrich\n"
    )
    return path


@pytest.fixture
def started(monkeypatch: pytest.MonkeyPatch) -> list[Sequence[Sequence[str]]]:
    """The command lists ``supervise`` was called with (nothing really starts)."""
    calls: list[Sequence[Sequence[str]]] = []

    def fake(commands: Sequence[Sequence[str]], poll: float = 0.0) -> int:
        calls.append(commands)
        return 0

    monkeypatch.setattr(replicas, "supervise", fake)
    return calls


def test_children_run_the_same_command_line_with_their_own_metrics_port(
    tmp_path: Path, started: list[Sequence[Sequence[str]]]
) -> None:
    spec = kafka_spec(tmp_path / "orders.yaml")
    args = ["consume", str(spec), "--until-idle", "2", "--pool", "a=3", "--pool", "b=4"]
    args += ["--replicas", "3", "--metrics-port", "9400", "--log-level", "debug"]
    args += ["--metrics-host", "0.0.0.0"]
    result = CliRunner().invoke(app, args, env=WIDE)
    assert result.exit_code == 0, result.output
    tail = ["--until-idle", "2.0", "--metrics-host", "0.0.0.0", "--pool", "a=3", "--pool", "b=4"]
    tail += ["--log-level", "debug"]
    tail += ["--", str(spec)]
    head = [sys.executable, "-m", "orchestration.cli", "consume", "--metrics-port"]
    assert started == [[[*head, str(9400 + i), *tail] for i in range(3)]]


def test_without_a_metrics_port_children_get_none(
    tmp_path: Path, started: list[Sequence[Sequence[str]]]
) -> None:
    spec = kafka_spec(tmp_path / "orders.yaml")
    result = CliRunner().invoke(app, ["consume", str(spec), "--replicas", "2"], env=WIDE)
    assert result.exit_code == 0, result.output
    command = [sys.executable, "-m", "orchestration.cli", "consume", "--", str(spec)]
    assert started == [[command, command]]


@pytest.mark.parametrize(
    ("extra", "message"),
    [
        (["--replicas", "0"], "'--replicas'"),
        (["--replicas", "65"], "'--replicas'"),
        (["--replicas", "3", "--metrics-port", "65534"], "3 replicas need ports 65534..65536"),
    ],
)
def test_bad_replica_options_are_usage_errors(
    tmp_path: Path, started: list[Sequence[Sequence[str]]], extra: list[str], message: str
) -> None:
    spec = kafka_spec(tmp_path / "orders.yaml")
    result = CliRunner().invoke(app, ["consume", str(spec), *extra], env=WIDE)
    assert result.exit_code == 2, result.output
    assert message in result.output
    assert started == []


def test_a_bad_spec_exits_2_before_any_replica_starts(
    tmp_path: Path, started: list[Sequence[Sequence[str]]]
) -> None:
    (tmp_path / "bad.yaml").write_text("name: bad\nhandler: consumers.dev.examples:enrich\n")
    result = CliRunner().invoke(app, ["consume", str(tmp_path), "--replicas", "2"], env=WIDE)
    assert result.exit_code == 2, result.output
    assert "bad.yaml" in result.output
    assert started == []


@pytest.mark.parametrize(
    ("subscription", "ordering", "refused"),
    [
        ("exclusive", "key", "an exclusive Pulsar subscription admits one consumer"),
        ("shared", "key", "breaks ordering: key"),
        ("shared", "none", None),
        ("key_shared", "key", None),
        ("failover", "partition", None),
    ],
)
def test_pulsar_subscriptions_that_cannot_scale_out_are_refused(
    tmp_path: Path,
    started: list[Sequence[Sequence[str]]],
    subscription: str,
    ordering: str,
    refused: str | None,
) -> None:
    (tmp_path / "p.yaml").write_text(
        "name: p\n"
        "source: {kind: pulsar, service_url: 'pulsar://127.0.0.1:1', topics: [p], "
        f"subscription: s, subscription_type: {subscription}}}\n"
        f"handler: consumers.dev.examples:enrich\nordering: {ordering}\n"
    )
    result = CliRunner().invoke(app, ["consume", str(tmp_path), "--replicas", "2"], env=WIDE)
    if refused is None:
        assert result.exit_code == 0, result.output
        assert len(started) == 1
    else:
        assert result.exit_code == 2, result.output
        assert refused in " ".join(result.output.split())
        assert started == []
