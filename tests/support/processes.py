"""Helpers for tests that run ``lanehouse consume`` as a separate process."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from collections.abc import Mapping
from pathlib import Path

from consumers.dev.embedded.pulsar import PulsarLiteBroker
from consumers.dev.embedded.tansu import TEST_CLIENT_CONFIG, TansuBroker
from tests.support.recording import order_violations, read_run

REPO = Path(__file__).resolve().parents[2]


def source_yaml(broker: TansuBroker | PulsarLiteBroker, topic: str, group: str) -> str:
    """The ``source:`` block of a spec reading ``topic`` as ``group`` (a Pulsar subscription)."""
    if isinstance(broker, PulsarLiteBroker):
        return f"""source:
  kind: pulsar
  service_url: {broker.url}
  topics: [{topic}]
  subscription: {group}
"""
    config = "\n".join(f"    {k}: {v}" for k, v in TEST_CLIENT_CONFIG.items())
    return f"""source:
  kind: kafka
  bootstrap_servers: {broker.bootstrap}
  topics: [{topic}]
  group: {group}
  config:
{config}
"""


def write_spec(
    path: Path,
    broker: TansuBroker | PulsarLiteBroker,
    topic: str,
    group: str,
    concurrency: int,
    handler: str = "record",
    extra: str = "",
    drain_timeout: str = "10s",
) -> Path:
    """A spec for ``lanehouse consume`` whose handler is ``tests.support.recording:<handler>``."""
    path.write_text(
        f"""name: recorder
{source_yaml(broker, topic, group)}handler: tests.support.recording:{handler}
ordering: key
concurrency: {concurrency}
commit_interval: 200ms
drain_timeout: {drain_timeout}
{extra}"""
    )
    return path


def start_consumer(
    spec: Path,
    record_file: Path,
    delay: float,
    *extra: str,
    env: Mapping[str, str] | None = None,
) -> subprocess.Popen[bytes]:
    """``lanehouse consume`` of ``spec`` in a process of its own; ``env`` adds variables (a
    ``PYTHONPATH`` there comes before the repository's)."""
    added = dict(env or {})
    path = os.pathsep.join(filter(None, [added.pop("PYTHONPATH", ""), str(REPO)]))
    env = {
        **os.environ,
        **added,
        "PYTHONPATH": path,
        "LH_RECORD_FILE": str(record_file),
        "LH_DELAY": str(delay),
    }
    return subprocess.Popen(
        [sys.executable, "-m", "orchestration.cli", "consume", str(spec), *extra],
        cwd=REPO,
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
    )


def stop_group(proc: subprocess.Popen[bytes], timeout: float = 120) -> None:
    """Stop a process started in a session of its own, and everything it started, as a
    terminal's Ctrl-C does; killed if it has not exited after ``timeout`` s."""
    os.killpg(proc.pid, signal.SIGINT)
    try:
        proc.wait(timeout=timeout)
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, signal.SIGKILL)
        proc.wait()


def lines(path: Path) -> int:
    return len(read_run(str(path)))


def finish(proc: subprocess.Popen[bytes], timeout: float = 120) -> str:
    try:
        out, _ = proc.communicate(timeout=timeout)
    except subprocess.TimeoutExpired:
        proc.kill()
        out, _ = proc.communicate(timeout=30)
        tail = out.decode(errors="replace")[-3000:]
        raise AssertionError(f"consumer still running after {timeout:.0f}s:\n{tail}") from None
    text = out.decode(errors="replace")
    assert proc.returncode == 0, f"consumer exited {proc.returncode}:\n{text[-3000:]}"
    return text


def assert_complete(runs: list[Path], count: int, keys: int) -> None:
    rows = [row for run in runs for row in read_run(str(run))]
    seen = {(key, seq) for key, seq, *_ in rows}
    per_key: dict[str, int] = {}
    for key, seq, *_ in rows:
        per_key[key] = max(per_key.get(key, -1), seq)
    assert sum(n + 1 for n in per_key.values()) == count, "some key is missing records"
    assert len(seen) == count, f"lost records: {count - len(seen)} of {count} never handled"
    for run in runs:
        assert order_violations(read_run(str(run))) == [], f"key order broken in {run.name}"
