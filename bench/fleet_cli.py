"""The fleet bench's *cli* mode: R replicas as ``lanehouse consume SPEC --replicas R``, the real
command line (R = 1 in the command's own process, R = 2 a supervisor and two replica processes
with ``LANEHOUSE_REPLICA`` set). ``--until-idle 1`` ends it a second after its last record, so
the bench has nothing to stop.
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path
from typing import Any

import psutil

ROOT = Path(__file__).resolve().parent.parent


class CliFleet:
    """``lanehouse consume SPEC --replicas R --until-idle 1``, which ends itself once idle."""

    def __init__(self, spec: Path, replicas: int, env: dict[str, str], work: Path) -> None:
        self.command = [sys.executable, "-m", "orchestration.cli", "consume", str(spec)]
        self.command += ["--replicas", str(replicas), "--until-idle", "1", "--log-level", "WARNING"]
        self.env, self.log = env, work / "output.log"
        self.procs: list[subprocess.Popen[bytes]] = []

    def start(self) -> None:
        with open(self.log, "w") as log:
            self.procs.append(
                subprocess.Popen(
                    self.command, cwd=ROOT, env=self.env, stdout=log, stderr=subprocess.STDOUT
                )
            )

    def processes(self) -> list[psutil.Process]:
        """The command and, with ``--replicas 2``, its replica processes."""
        try:
            top = psutil.Process(self.procs[0].pid)
            return [top, *top.children(recursive=True)]
        except psutil.NoSuchProcess:
            return []

    def alive(self) -> bool:
        return self.procs[0].poll() is None

    def stop(self) -> None:
        """Nothing to do: ``--until-idle 1`` ends the command a second after its last record."""

    def wait(self, timeout: float) -> list[str]:
        proc = self.procs[0]
        try:
            code = proc.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            proc.kill()
            code = proc.wait()
        return [] if code == 0 else [f"lanehouse consume exited {code} (log: {self.log})"]

    def describe(self) -> dict[str, Any]:
        return {}
