"""pulsar-lite (a Pulsar-protocol broker on RocksDB, one binary) run as a child process.

Not via ``pulsar_lite.start_broker``: that prints to stdout, logs to ``/tmp/pulsar-lite.log``,
reference-counts brokers per db and scans ports 6650-6700. Quirks absorbed here (shared NOTES,
"Pulsar: pulsar-lite"):

- Without ``[metrics] enabled = false`` it also serves metrics on 0.0.0.0:8080, so each data
  dir gets a ``pulsar-lite.toml`` saying so, passed with ``--config``.
- The db is ``DATA_DIR/db.rocksdb``; a restart on the same data dir keeps topics, messages and
  subscription cursors, after SIGTERM (no graceful shutdown, ~3 ms) and SIGKILL alike.
- On a taken port it opens its db, then exits 1 with ``AddrInUse`` while the *other* process
  answers. So readiness = this run logged "Server listening on HOST:PORT", the child is alive,
  the port accepts, and a client round trip works.
"""

from __future__ import annotations

import atexit
import contextlib
import re
import shutil
import signal
import socket
import subprocess
import tempfile
import time
from collections.abc import Mapping
from pathlib import Path
from types import MappingProxyType, TracebackType
from typing import Any, Final, Self

import pulsar

from consumers.errors import BrokerError

__all__ = [
    "PULSAR_TEST_CLIENT_KWARGS",
    "PULSAR_TEST_PRODUCER_KWARGS",
    "PulsarLiteBroker",
    "pulsar_lite_binary",
    "start_pulsar_lite",
    "validate_pulsar_topic",
]

HOST: Final = "127.0.0.1"
CONFIG_TEXT: Final = "[metrics]\nenabled = false\n"

#: ``pulsar.Client(url, **PULSAR_TEST_CLIENT_KWARGS)``: C++ client logs at error level only.
PULSAR_TEST_CLIENT_KWARGS: Final[Mapping[str, Any]] = MappingProxyType(
    {"logger": pulsar.ConsoleLogger(pulsar.LoggerLevel.Error)}
)
#: ``client.create_producer(topic, **PULSAR_TEST_PRODUCER_KWARGS)``. With the client default
#: (``block_if_queue_full=False``, ``max_pending_messages=1000``) a fast ``send_async`` loop
#: gets ``ProducerQueueIsFull`` in its callbacks and those messages are never sent.
PULSAR_TEST_PRODUCER_KWARGS: Final[Mapping[str, Any]] = MappingProxyType(
    {"block_if_queue_full": True}
)

_NAME = re.compile(r"[a-zA-Z0-9._-]+")
_POLL_INTERVAL: Final = 0.005


def validate_pulsar_topic(topic: str) -> str:
    """Return the full name of ``topic``; raise ``ValueError`` saying why it is invalid.

    Accepts ``persistent://tenant/namespace/topic`` or a short ``topic`` (expanded to
    ``persistent://public/default/topic``); each part must match ``[a-zA-Z0-9._-]+``.
    """
    if not isinstance(topic, str) or not topic:
        raise ValueError(f"invalid Pulsar topic {topic!r}: must be a non-empty string")
    scheme, sep, rest = topic.partition("://")
    if not sep:
        scheme, rest = "persistent", f"public/default/{topic}"
    parts = rest.split("/")
    if scheme != "persistent" or len(parts) != 3:
        raise ValueError(
            f"invalid Pulsar topic {topic!r}: expected 'persistent://tenant/namespace/topic' "
            "or a short name without '/'"
        )
    for label, part in zip(("tenant", "namespace", "topic"), parts, strict=True):
        if not _NAME.fullmatch(part):
            raise ValueError(
                f"invalid Pulsar topic {topic!r}: {label} {part!r} must be non-empty ASCII "
                "letters, digits, '.', '_' or '-'"
            )
    return f"persistent://{rest}"


def pulsar_lite_binary() -> str:
    """Path of the pulsar-lite executable (the wheel's, else ``$PULSAR_LITE_BINARY``/PATH)."""
    from pulsar_lite.binary_finder import find_pulsar_lite_binary

    try:
        return str(find_pulsar_lite_binary())
    except FileNotFoundError as exc:
        raise BrokerError(str(exc)) from exc


class PulsarLiteBroker:
    """A running pulsar-lite child; use :func:`start_pulsar_lite`. Leaving ``with`` stops it."""

    def __init__(
        self, process: subprocess.Popen[bytes], port: int, data_dir: Path, offset: int, owned: bool
    ) -> None:
        self._process = process
        self.port = port
        self.data_dir = data_dir
        self.log_path = data_dir / "pulsar-lite.log"
        self._log_offset = offset  # the log is appended to across restarts
        self._owned = owned
        _running.add(self)

    @property
    def url(self) -> str:
        return f"pulsar://{HOST}:{self.port}"

    @property
    def pid(self) -> int:
        return self._process.pid

    @property
    def returncode(self) -> int | None:
        return self._process.poll()

    def alive(self) -> bool:
        return self._process.poll() is None

    def log_tail(self, lines: int = 40) -> str:
        """The last ``lines`` lines this run wrote to :attr:`log_path`."""
        return "\n".join(self._log_text().splitlines()[-lines:])

    def _log_text(self) -> str:
        try:
            with self.log_path.open("rb") as log:
                log.seek(self._log_offset)
                return log.read().decode("utf-8", errors="replace")
        except OSError as exc:
            return f"<log unavailable: {exc}>"

    def stop(self, timeout: float = 5.0) -> int:
        """SIGTERM, wait up to ``timeout`` s, then SIGKILL. Returns the exit status."""
        if self.alive():
            with contextlib.suppress(ProcessLookupError):
                self._process.send_signal(signal.SIGCONT)  # a paused broker cannot exit
                self._process.send_signal(signal.SIGTERM)
            try:
                self._process.wait(timeout)
            except subprocess.TimeoutExpired:
                self._process.kill()
                self._process.wait()
        return self._finish()

    def kill(self) -> int:
        """SIGKILL (a crash) and reap. Returns the exit status."""
        if self.alive():
            with contextlib.suppress(ProcessLookupError):
                self._process.kill()
        self._process.wait()
        return self._finish()

    def pause(self) -> None:
        """SIGSTOP: an outage that keeps connections and data; undo with :meth:`resume`."""
        self._process.send_signal(signal.SIGSTOP)

    def resume(self) -> None:
        self._process.send_signal(signal.SIGCONT)

    def _finish(self) -> int:
        _running.discard(self)
        if self._owned:
            shutil.rmtree(self.data_dir, ignore_errors=True)
            self._owned = False
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
        return f"PulsarLiteBroker(url={self.url!r}, pid={self.pid}, {state})"


_running: set[PulsarLiteBroker] = set()


@atexit.register
def _stop_all_at_exit() -> None:
    for broker in list(_running):
        broker.stop()


def start_pulsar_lite(
    port: int | None = None, data_dir: Path | None = None, startup_timeout: float = 10.0
) -> PulsarLiteBroker:
    """Start pulsar-lite on ``127.0.0.1:port`` (free port when ``None``) and wait until it serves.

    ``data_dir`` holds the db, the config (rewritten) and the log (appended); it is kept, so a
    later start on it finds the same data. When ``None`` a temporary one is used and removed when the broker stops.
    Raises :class:`BrokerError` with the log tail if the port is taken, the child dies or it
    does not answer in time.
    """
    binary = pulsar_lite_binary()
    if port is None:
        port = _free_port()
    owned = data_dir is None
    data_dir = Path(tempfile.mkdtemp(prefix="lanehouse-pulsar-")) if data_dir is None else data_dir
    data_dir.mkdir(parents=True, exist_ok=True)
    config = data_dir / "pulsar-lite.toml"
    config.write_text(CONFIG_TEXT)
    cmd = [binary, "--config", str(config), "--addr", f"{HOST}:{port}"]
    cmd += ["--db-path", str(data_dir / "db"), "--log-level", "info"]
    with (data_dir / "pulsar-lite.log").open("ab") as log:
        offset = log.tell()
        try:  # a file, not a PIPE: nobody drains a pipe during a long test, and a full one blocks
            process = subprocess.Popen(
                cmd, cwd=data_dir, stdin=subprocess.DEVNULL, stdout=log, stderr=subprocess.STDOUT
            )
        except OSError as exc:
            if owned:
                shutil.rmtree(data_dir, ignore_errors=True)
            raise BrokerError(f"cannot run pulsar-lite {binary!r}: {exc}") from exc
    broker = PulsarLiteBroker(process, port, data_dir, offset, owned)
    try:
        _wait_ready(broker, time.monotonic() + startup_timeout)
    except BaseException:
        broker.kill()
        raise
    return broker


def _wait_ready(broker: PulsarLiteBroker, deadline: float) -> None:
    bound = f"Server listening on {HOST}:{broker.port}"
    while not (bound in broker._log_text() and _accepts_tcp(broker.port)):
        if not broker.alive():
            raise _died(broker)
        if time.monotonic() > deadline:
            raise BrokerError(
                f"pulsar-lite on {broker.url} did not start in time\n{broker.log_tail()}"
            )
        time.sleep(_POLL_INTERVAL)
    timeout = max(1, round(deadline - time.monotonic()))
    client = pulsar.Client(
        broker.url, operation_timeout_seconds=timeout, **PULSAR_TEST_CLIENT_KWARGS
    )
    try:
        client.get_topic_partitions("persistent://public/default/__lanehouse_ready")
    except Exception as exc:  # the client raises pulsar.PulsarException subclasses
        raise BrokerError(
            f"pulsar-lite on {broker.url} opened its port but did not answer: {exc!r}\n"
            f"{broker.log_tail()}"
        ) from exc
    finally:
        client.close()
    if not broker.alive():
        raise _died(broker)


def _died(broker: PulsarLiteBroker) -> BrokerError:
    tail = broker.log_tail()
    hint = f" because {HOST}:{broker.port} is already in use" if "AddrInUse" in tail else ""
    return BrokerError(
        f"pulsar-lite exited with status {broker.returncode} before it was ready{hint}\n{tail}"
    )


def _accepts_tcp(port: int) -> bool:
    try:
        with socket.create_connection((HOST, port), timeout=0.5):
            return True
    except OSError:
        return False


def _free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind((HOST, 0))
        port: int = sock.getsockname()[1]
    return port
