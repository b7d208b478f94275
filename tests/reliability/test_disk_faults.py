"""Faults of the lake's disk under a landing workload on a real broker (Tansu), checked by the
suite's verifier plus the lake itself (every offset once): a landed file damaged below the
committed position, and a full disk (a small tmpfs). Each prints a ``RELIABILITY`` line."""

from __future__ import annotations

import os
import re
import signal
import subprocess
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from datetime import datetime
from pathlib import Path

import pytest

from consumers.backends.kafka.consumer import committed_offsets, log_end_offsets
from consumers.dev.embedded.tansu import TansuBroker
from consumers.dev.sample import produce_sample
from tests.helpers import wait_until
from tests.landing import every_offset_once, per_offset
from tests.reliability.faults import fill, produced
from tests.reliability.verifier import CommitSampler, verify
from tests.support.processes import finish, lines, start_consumer, write_spec

pytestmark = pytest.mark.reliability

PARTITIONS = 4
KEYS = 200
LANDING = "landing: {dataset: events, flush_rows: 500, flush_interval: 200ms}\n"


def files_of(lake: Path, partition: int) -> list[tuple[int, Path]]:
    """The partition's landed files Spark reads, by first offset."""
    root = lake / "landed" / "events"
    found = []
    for path in root.glob(f"event_date=*/*-p{partition}-o*.parquet"):
        found.append((int(path.stem.rsplit("-o", 1)[1]), path))
    return sorted(found)


def test_a_damaged_landed_file_is_moved_aside_and_landed_again(
    kafka_broker: TansuBroker, topic_factory, tmp_path: Path
) -> None:
    """Land records, stop, truncate one landed file and overwrite another (two partitions)
    below the committed positions, run to idleness: the run goes on, both files are in
    quarantine, and the lake holds every offset once. The one commit regression per damaged
    partition is the set-back itself (from the position to the file's first offset)."""
    topic = topic_factory(PARTITIONS)
    records = fill(kafka_broker, topic, 8_000, KEYS, PARTITIONS)
    group, lake = "g-damaged-file", tmp_path / "lake"
    spec = write_spec(tmp_path / "spec.yaml", kafka_broker, topic, group, 50, extra=LANDING)
    env = {"LANEHOUSE_LAKE": str(lake)}
    run, final = tmp_path / "run0.txt", tmp_path / "final.txt"

    def committed() -> dict[int, int]:
        return committed_offsets(kafka_broker.bootstrap, group, topic, PARTITIONS)

    with CommitSampler(kafka_broker.bootstrap, group, topic, PARTITIONS) as sampler:
        proc = start_consumer(spec, run, 0.0005, env=env)
        wait_until(lambda: sum(max(c, 0) for c in committed().values()) >= 4_000, timeout=120)
        proc.send_signal(signal.SIGTERM)  # a clean stop: drain, land, commit
        finish(proc)
        stopped_at = committed()
        damaged = {}
        for partition, spoil in ((0, lambda b: b[: len(b) // 2]), (1, lambda b: bytes(len(b)))):
            below = [(f, p) for f, p in files_of(lake, partition) if f < stopped_at[partition]]
            first, path = below[len(below) // 2]
            path.write_bytes(spoil(path.read_bytes()))
            damaged[partition] = (first, path, path.read_bytes())
        started = time.monotonic()
        out = finish(start_consumer(spec, final, 0.0, "--until-idle", "2", env=env))
        seconds = time.monotonic() - started
        ends = log_end_offsets(kafka_broker.bootstrap, topic, PARTITIONS)
        verdict = verify(records, [run, final], sampler, committed(), ends)
    for partition, (first, path, spoiled) in damaged.items():
        aside = lake / "landed" / "events" / "_quarantine" / path.parent.name / path.name
        assert aside.read_bytes() == spoiled, path  # kept as found (the name is landed anew)
        named = [
            line for line in out.splitlines() if "cannot be read" in line and path.name in line
        ]
        assert len(named) == 1 and f"{topic}[{partition}]" in named[0], out[-3000:]
        assert f"set back from {stopped_at[partition]} to {first}" in named[0]
    set_backs = {p for p, before, after in verdict.regressions}
    assert set_backs <= set(damaged) and len(verdict.regressions) <= len(damaged), verdict
    for partition, before, after in verdict.regressions:
        assert before == stopped_at[partition] and after >= damaged[partition][0]
    assert per_offset(lake) == every_offset_once(ends), "the lake is not exact per offset"
    assert verdict.lost == 0 and verdict.order_violations == 0 and verdict.committed == ends
    stamps = [logged_at(line) for line in out.splitlines() if "assigned" in line]
    stamps += [logged_at(line) for line in out.splitlines() if "restarts at" in line]
    print(
        verdict.line(
            f"damaged landed files (truncated, zeroed), restart: both quarantined in "
            f"{(max(stamps) - min(stamps)) * 1000:.0f} ms of assignment work, lake exact, "
            f"final run {seconds:.1f}s"
        ).replace(f"regressions={len(verdict.regressions)}", f"set_backs={len(set_backs)}")
    )


def logged_at(line: str) -> float:
    """A log line's time (``%(asctime)s``: ``2026-11-26 21:00:00,123 ...``), in seconds."""
    day, clock = line.split()[:2]
    moment = datetime.strptime(f"{day} {clock}", "%Y-%m-%d %H:%M:%S,%f")
    return moment.timestamp()


@contextmanager
def small_disk(mount: Path, size: str) -> Iterator[Path]:
    """A tmpfs of ``size`` at ``mount`` (root only), unmounted afterwards, also on failure."""
    if os.geteuid() != 0:
        pytest.skip("a full disk needs a tmpfs mount: root only")
    mount.mkdir()
    subprocess.run(["mount", "-t", "tmpfs", "-o", f"size={size}", "tmpfs", str(mount)], check=True)
    try:
        yield mount
    finally:
        subprocess.run(["umount", "-l", str(mount)], check=False)


def fill_disk(ballast: Path) -> None:
    """Write ``ballast`` until the disk is full."""
    with ballast.open("wb") as out:
        try:
            while True:
                out.write(b"\0" * 65_536)
                out.flush()
        except OSError:
            pass


class Output:
    """A consumer process's output, read on a thread as it comes (the pipe never fills)."""

    def __init__(self, proc: subprocess.Popen[bytes]) -> None:
        self.lines: list[str] = []
        assert proc.stdout is not None
        stream = proc.stdout
        self._thread = threading.Thread(target=self._read, args=(stream,), daemon=True)
        self._thread.start()

    def _read(self, stream: object) -> None:
        for raw in stream:  # type: ignore[attr-defined]
            self.lines.append(raw.decode(errors="replace"))

    def matching(self, pattern: str) -> list[str]:
        return [line for line in list(self.lines) if re.search(pattern, line)]

    def text(self) -> str:
        self._thread.join(timeout=30)
        return "".join(self.lines)


def test_a_full_disk_pauses_landing_and_it_resumes_when_space_returns(
    kafka_broker: TansuBroker, topic_factory, tmp_path: Path
) -> None:
    """The lake on a full 4 MB tmpfs: the workload handles the 1,000 records it had, its
    partitions pause, it names the path, and 8,000 more records produced meanwhile are not
    handled ahead; ``--until-idle`` does not end the run. Space freed: it resumes, ends idle
    with exit 0, and the lake holds every offset once with no temporary left. Before: it
    consumed on (handling ahead), left a zero-byte ``.tmp`` per retry and exited 0 with the
    records unlanded."""
    topic = topic_factory(PARTITIONS)
    group = "g-full-disk"
    produce_sample(kafka_broker.bootstrap, topic, 1_000, KEYS)
    with small_disk(tmp_path / "disk", "4m") as disk:
        lake = disk / "lake"
        spec = write_spec(tmp_path / "spec.yaml", kafka_broker, topic, group, 50, extra=LANDING)
        run = tmp_path / "run.txt"
        fill_disk(disk / "ballast")
        with CommitSampler(kafka_broker.bootstrap, group, topic, PARTITIONS) as sampler:
            env = {"LANEHOUSE_LAKE": str(lake)}
            proc = start_consumer(spec, run, 0.0, "--until-idle", "2", env=env)
            out = Output(proc)
            full = r"\[(\d+)\]: landing to .* failed: No space left on device \(ENOSPC\)"

            def paused() -> set[str]:
                return {m.group(1) for line in out.matching(full) if (m := re.search(full, line))}

            wait_until(lambda: len(paused()) == PARTITIONS, timeout=60, message="all paused")
            wait_until(lambda: out.matching("retrying in 0.2 s"), timeout=30, message="a retry")
            blocked_since = time.monotonic()
            produce_sample(kafka_broker.bootstrap, topic, 8_000, KEYS, key_prefix="m")
            # Past --until-idle's 2 s: the failures from 0.1 s to 1.6 s (3.1 s) are behind.
            wait_until(lambda: out.matching("retrying in 3.2 s"), timeout=60, message="3.2 s")
            blocked = time.monotonic() - blocked_since
            assert proc.poll() is None, "--until-idle ended the run with records unlanded"
            handled = lines(run)
            assert handled == 1_000, f"{handled - 1_000} records handled ahead of a full disk"
            assert str(lake) in out.matching(full)[0]
            (disk / "ballast").unlink()  # space returns
            freed = time.monotonic()
            wait_until(lambda: out.matching("works again"), timeout=30, message="resumed")
            resumed = time.monotonic() - freed
            proc.wait(timeout=120)
            text = out.text()
            assert proc.returncode == 0, text[-3000:]
            committed = committed_offsets(kafka_broker.bootstrap, group, topic, PARTITIONS)
            ends = log_end_offsets(kafka_broker.bootstrap, topic, PARTITIONS)
            records = produced(kafka_broker, topic, PARTITIONS)
            verdict = verify(records, [run], sampler, committed, ends)
        assert per_offset(lake) == every_offset_once(ends), "the lake is not exact per offset"
        assert list(lake.rglob("*.tmp")) == [] and list(lake.rglob(".*")) == []
        warnings = len(re.findall("No space left on device", text))
    print(
        verdict.line(
            f"full disk (4 MB tmpfs): 1,000 handled, 0 of 8,000 more handled in {blocked:.1f}s "
            f"blocked, {warnings} warnings, resumed {resumed:.1f}s after space returned"
        )
    )
    assert verdict.ok, verdict
