"""pulsar-lite (a Pulsar-protocol broker on RocksDB, one binary) run as a child process.

Not via ``pulsar_lite.start_broker``: that prints to stdout, logs to ``/tmp/pulsar-lite.log``,
reference-counts brokers per db and scans ports 6650-6700. Quirks absorbed here (shared NOTES,
"Pulsar: pulsar-lite"):

- Without ``[metrics] enabled = false`` it also serves metrics on 0.0.0.0:8080 (every
  interface, no setting for the address), so each data dir gets a ``pulsar-lite.toml`` saying
  so, passed with ``--config``; a start whose log announces the metrics endpoint anyway fails.
- The db is ``DATA_DIR/db.rocksdb``; a restart on the same data dir keeps topics, messages and
  subscription cursors, after SIGTERM (no graceful shutdown, ~3 ms) and SIGKILL alike.
- It runs in the data dir, so every path it gets is absolute: a relative one would be taken
  from there again (the db in ``DATA_DIR/DATA_DIR/``, the config not found).
- It runs in a session of its own, so a terminal's Ctrl-C reaches only its parent (see
  :mod:`consumers.dev.embedded.child`).
- On a taken port it opens its db, then exits 1 with ``AddrInUse`` while the *other* process
  answers. So readiness = this run logged "Server listening on HOST:PORT", the child is alive,
  the port accepts, and a client round trip works.
"""

from __future__ import annotations

import shutil
import subprocess
import tempfile
import time
from collections.abc import Mapping
from pathlib import Path
from types import MappingProxyType
from typing import Any, Final

import pulsar

from consumers.backends.pulsar.client_log import client_logger
from consumers.config.pulsar_options import validate_pulsar_topic
from consumers.dev.embedded.child import (
    HOST,
    BrokerProcess,
    accepts_tcp,
    free_port,
    missing_package,
    spawn,
)
from consumers.errors import BrokerError

__all__ = [
    "PULSAR_TEST_CLIENT_KWARGS",
    "PULSAR_TEST_PRODUCER_KWARGS",
    "PulsarLiteBroker",
    "pulsar_lite_binary",
    "start_pulsar_lite",
    "validate_pulsar_topic",
]

CONFIG_TEXT: Final = "[metrics]\nenabled = false\n"
METRICS_LINE: Final = "Metrics endpoint listening"

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

_POLL_INTERVAL: Final = 0.005


def pulsar_lite_binary() -> str:
    """Path of the pulsar-lite executable (the wheel's, else ``$PULSAR_LITE_BINARY``/PATH)."""
    try:
        from pulsar_lite.binary_finder import find_pulsar_lite_binary
    except ImportError as exc:
        raise missing_package("the embedded Pulsar broker (pulsar-lite)", "pulsar-lite") from exc
    try:
        return str(find_pulsar_lite_binary())
    except FileNotFoundError as exc:
        raise BrokerError(str(exc)) from exc


class PulsarLiteBroker(BrokerProcess):
    """A running pulsar-lite child; use :func:`start_pulsar_lite`. Leaving ``with`` stops it."""

    def __init__(
        self, process: subprocess.Popen[bytes], port: int, data_dir: Path, offset: int, owned: bool
    ) -> None:
        log_path = data_dir / "pulsar-lite.log"  # appended to across restarts
        super().__init__(process, port, log_path, data_dir if owned else None, offset)
        self.data_dir = data_dir

    @property
    def url(self) -> str:
        return f"pulsar://{HOST}:{self.port}"

    @property
    def address(self) -> str:
        return self.url


def start_pulsar_lite(
    port: int | None = None,
    data_dir: Path | None = None,
    startup_timeout: float = 10.0,
    default_partitions: int = 0,
) -> PulsarLiteBroker:
    """Start pulsar-lite on ``127.0.0.1:port`` (free port when ``None``) and wait until it serves.

    ``data_dir`` (relative to the current directory) holds the db, the config (rewritten) and
    the log (appended); it is kept, so a later start on it finds the same data. When ``None`` a
    temporary one is used and removed when the broker stops. Raises :class:`BrokerError` with
    the log tail if the port is taken, the child dies, it does not answer in time or it serves
    metrics after all.
    """
    binary = pulsar_lite_binary()
    if port is None:
        port = free_port()
    owned = data_dir is None
    data_dir = Path(tempfile.mkdtemp(prefix="lanehouse-pulsar-")) if data_dir is None else data_dir
    data_dir = data_dir.resolve()
    data_dir.mkdir(parents=True, exist_ok=True)
    config = data_dir / "pulsar-lite.toml"
    if default_partitions < 0:
        raise ValueError("default_partitions must be >= 0")
    partitions = f"default_partitions = {default_partitions}\n" if default_partitions else ""
    config.write_text(partitions + CONFIG_TEXT)
    cmd = [binary, "--config", str(config), "--addr", f"{HOST}:{port}"]
    cmd += ["--db-path", str(data_dir / "db"), "--log-level", "info"]
    with (data_dir / "pulsar-lite.log").open("ab") as log:
        offset = log.tell()
        try:
            process = spawn(cmd, log, PulsarLiteBroker.stop_signal, cwd=data_dir)
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
    while not (bound in broker.log_text() and accepts_tcp(broker.port)):
        if not broker.alive():
            raise _died(broker)
        if time.monotonic() > deadline:
            raise BrokerError(
                f"pulsar-lite on {broker.url} did not start in time\n{broker.log_tail()}"
            )
        time.sleep(_POLL_INTERVAL)
    timeout = max(1, round(deadline - time.monotonic()))
    # The process's first Pulsar client sets the C++ logger of every later one (pulsar-client
    # keeps the first): the same pipe as the workloads' clients, not the tests' console one.
    client = pulsar.Client(broker.url, operation_timeout_seconds=timeout, logger=client_logger())
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
    if METRICS_LINE in broker.log_text():  # logged before "Server listening"
        raise BrokerError(
            f"pulsar-lite on {broker.url} ignored {broker.data_dir / 'pulsar-lite.toml'} and "
            f"serves metrics on every interface\n{broker.log_tail()}"
        )


def _died(broker: PulsarLiteBroker) -> BrokerError:
    tail = broker.log_tail()
    hint = f" because {HOST}:{broker.port} is already in use" if "AddrInUse" in tail else ""
    return BrokerError(
        f"pulsar-lite exited with status {broker.returncode} before it was ready{hint}\n{tail}"
    )
