"""A new user's Dagster project with Lanehouse in it, as they would make it: a wheel built from
this tree (not the editable install), a fresh venv, ``dagster-dg-cli`` and ``create-dagster``
from the package index, ``create-dagster project``, then the user's own files.

The fresh venv sees the suite's site-packages through one ``.pth`` line, for the heavy
dependencies (Dagster, PySpark, the broker clients): a line in a ``.pth`` adds a directory to
``sys.path`` but does not run the ``.pth`` files in it, so the suite's editable install of
Lanehouse stays out and ``import orchestration`` finds the wheel's copy. pip counts what it sees
there as installed, so only dg's own small dependencies come from the index (or pip's cache).
Nothing here uses uv (``--no-uv-sync``) or runs from the repository (``''`` on ``sys.path``
would import the tree instead of the wheel).
"""

from __future__ import annotations

import os
import subprocess
import sys
import sysconfig
from dataclasses import dataclass
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
PROJECT = "audit_project"
#: The tree a wheel is built from: what git tracks plus new files it does not ignore.
_LIST_TREE = ["git", "ls-files", "-z", "--cached", "--others", "--exclude-standard"]


@dataclass(frozen=True)
class NewProject:
    venv: Path
    root: Path
    home: Path  # DAGSTER_HOME

    @property
    def python(self) -> Path:
        return self.venv / "bin" / "python"

    def env(self, **extra: str) -> dict[str, str]:
        """The user's shell: their venv first on PATH, no trace of the suite's Python path."""
        env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "VIRTUAL_ENV")}
        env.update(
            PATH=f"{self.venv / 'bin'}{os.pathsep}{env.get('PATH', '')}",
            VIRTUAL_ENV=str(self.venv),
            DAGSTER_HOME=str(self.home),
            DAGSTER_DG_UPDATE_CHECK_ENABLED="0",  # no version check against the index
            **extra,
        )
        return env

    def run(self, *command: str | Path, **extra: str) -> subprocess.CompletedProcess[str]:
        """``command`` in the project's directory; fails the test with its output if it fails."""
        done = subprocess.run(
            [str(c) for c in command],
            cwd=self.root,
            env=self.env(**extra),
            capture_output=True,
            text=True,
            timeout=300,
        )
        assert done.returncode == 0, (
            f"{command} exited {done.returncode}:\n{done.stdout}\n{done.stderr}"
        )
        return done


def build_wheel(work: Path) -> Path:
    """A wheel of the working tree, built from a copy (a build in place leaves ``build/``)."""
    listed = subprocess.run(_LIST_TREE, cwd=REPO, capture_output=True, check=True).stdout
    source = work / "source"
    for name in filter(None, listed.decode().split("\0")):
        path = REPO / name
        if path.is_file():
            target = source / name
            target.parent.mkdir(parents=True, exist_ok=True)
            target.write_bytes(path.read_bytes())
    dist = work / "dist"
    _pip(sys.executable, "wheel", "--no-deps", "-w", dist, source)
    (wheel,) = dist.glob("lanehouse-*.whl")
    return wheel


def create(work: Path, wheel: Path, dagster_version: str) -> NewProject:
    """A venv with the wheel and the dg tooling, and a project scaffolded in it, installed."""
    venv = work / "venv"
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", venv], check=True)
    site = venv / "lib" / f"python{sys.version_info.major}.{sys.version_info.minor}"
    (site / "site-packages" / "_suite_packages.pth").write_text(sysconfig.get_paths()["purelib"])
    python = str(venv / "bin" / "python")
    _pip(python, "install", "--no-deps", wheel, cwd=work)
    tools = [f"dagster-dg-cli=={dagster_version}", f"create-dagster=={dagster_version}"]
    _pip(python, "install", "--no-compile", *tools, cwd=work)
    home = work / "dagster-home"
    home.mkdir()
    (home / "dagster.yaml").write_text("telemetry:\n  enabled: false\n")
    project = NewProject(venv=venv, root=work / PROJECT, home=home)
    scaffold = NewProject(venv=venv, root=work, home=home)
    scaffold.run(venv / "bin" / "create-dagster", "project", PROJECT, "--no-uv-sync")
    project.run(python, "-m", "pip", "install", "-q", "--no-deps", "-e", ".")
    return project


def _pip(python: str, *arguments: str | Path, cwd: Path | None = None) -> None:
    command = [python, "-m", "pip", "-q", "--disable-pip-version-check", *map(str, arguments)]
    done = subprocess.run(command, cwd=cwd, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, f"pip {arguments[0]} failed:\n{done.stdout}\n{done.stderr}"
