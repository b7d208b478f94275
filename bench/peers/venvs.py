"""Virtual environments for the bench peers (Quix Streams, Arroyo), one each, built on demand.

The peers cannot share the project venv nor each other's: quixstreams pins confluent-kafka
<2.13 while sentry-arroyo needs >=2.13.2. So each peer gets ``<repo>/.bench-venvs/<name>``
built from ``bench/peers/requirements-<name>.txt`` (exact pins), and its child script runs with
that venv's python. A stamp file holding the hash of the requirements text is written only
after pip succeeded, so an edited requirements file or a failed install triggers a reinstall.
"""

from __future__ import annotations

import hashlib
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent.parent
PEERS = Path(__file__).resolve().parent
VENVS = ROOT / ".bench-venvs"
NAMES = ("quix", "arroyo")
_STAMP = ".requirements-sha256"


def _log(msg: str) -> None:
    print(f"[bench.peers] {msg}", file=sys.stderr, flush=True)


def _run(cmd: list[str], what: str) -> None:
    proc = subprocess.run(cmd, capture_output=True, text=True)
    if proc.returncode != 0:
        tail = "\n".join((proc.stdout + proc.stderr).splitlines()[-40:])
        raise RuntimeError(f"{what} failed (exit {proc.returncode}): {' '.join(cmd)}\n{tail}")


def peer_python(name: str) -> Path:
    """The python of the ``name`` peer's venv, (re)built when missing or out of date."""
    if name not in NAMES:
        raise ValueError(f"unknown peer {name!r}; expected one of {NAMES}")
    requirements = PEERS / f"requirements-{name}.txt"
    digest = hashlib.sha256(requirements.read_bytes()).hexdigest()
    venv = VENVS / name
    python = venv / "bin" / "python"
    stamp = venv / _STAMP
    if python.exists() and stamp.exists() and stamp.read_text().strip() == digest:
        return python
    stamp.unlink(missing_ok=True)
    if not python.exists():
        _log(f"creating venv {venv}")
        _run([sys.executable, "-m", "venv", str(venv)], f"creating venv {venv}")
    _log(f"installing {requirements.name} into {venv} (takes a minute)")
    _run(
        [
            str(python),
            "-m",
            "pip",
            "install",
            "--disable-pip-version-check",
            "-q",
            "-r",
            str(requirements),
        ],
        f"pip install -r {requirements}",
    )
    stamp.write_text(digest + "\n")
    _log(f"{name} venv ready")
    return python


if __name__ == "__main__":
    for arg in sys.argv[1:] or NAMES:
        print(peer_python(arg))
