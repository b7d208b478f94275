"""pulsar-client's log lines reach the ``lanehouse.pulsar.client`` logger, all of them before
the process exits, and a process that closed its client exits cleanly (``client_log.py``: the
client's Python-logger hook aborted about one exit in two of the script below). Each case is its
own process because pulsar-client keeps the first client's logger for the whole process."""

from __future__ import annotations

import re
import subprocess
import sys
import textwrap
import uuid

import pulsar
import pytest

from consumers.dev.embedded.pulsar import PULSAR_TEST_CLIENT_KWARGS, PulsarLiteBroker
from tests.support.processes import REPO

pytestmark = pytest.mark.integration

#: Subscribe, receive what is there, close, exit: the shape that aborted at exit.
SCRIPT = textwrap.dedent(
    """
    import logging, sys, pulsar
    from consumers.backends.pulsar.client import client_kwargs
    logging.basicConfig(level=logging.INFO, format="%(name)s %(levelname)s %(message)s")
    client = pulsar.Client(sys.argv[1], **client_kwargs({}))
    consumer = client.subscribe(
        sys.argv[2], "s", consumer_type=pulsar.ConsumerType.Shared,
        initial_position=pulsar.InitialPosition.Earliest,
    )
    for _ in range(20):
        consumer.receive(5000)
    consumer.close()
    client.close()
    """
)
#: The same, with a log handler that takes 20 ms a line: the reader thread falls behind.
SLOW_HANDLER = SCRIPT.replace(
    "logging.basicConfig(",
    "import time\n"
    "class Slow(logging.StreamHandler):\n"
    "    def emit(self, record):\n"
    "        time.sleep(0.02)\n"
    "        super().emit(record)\n"
    "logging.basicConfig(handlers=[Slow()], ",
)
CONNECTED = re.compile(r"^lanehouse\.pulsar\.client INFO \[\S+ -> \S+\] Connected to broker$", re.M)
CPP_PREFIX = re.compile(r"^\d{4}-\d\d-\d\d [\d:.]+ [A-Z]+ ", re.M)


def filled_topic(broker: PulsarLiteBroker, prefix: str) -> str:
    """A new topic holding the 20 messages :data:`SCRIPT` receives."""
    topic = f"{prefix}-{uuid.uuid4().hex[:8]}"
    client = pulsar.Client(broker.url, **PULSAR_TEST_CLIENT_KWARGS)
    try:
        producer = client.create_producer(topic)
        for i in range(20):
            producer.send(str(i).encode(), partition_key=str(i))
        producer.close()
    finally:
        client.close()
    return topic


def run_script(script: str, broker: PulsarLiteBroker, topic: str) -> tuple[int, str]:
    """``script`` in a process of its own: its exit status and everything it printed."""
    done = subprocess.run(
        [sys.executable, "-c", script, broker.url, topic],
        cwd=REPO,
        capture_output=True,
        timeout=60,
    )
    return done.returncode, (done.stdout + done.stderr).decode(errors="replace")


def test_processes_log_through_python_and_exit_cleanly(pulsar_broker: PulsarLiteBroker) -> None:
    topic = filled_topic(pulsar_broker, "log-exit")
    for attempt in range(8):
        code, out = run_script(SCRIPT, pulsar_broker, topic)
        assert code == 0, f"exit {code} on run {attempt}:\n{out[-1500:]}"
        # The client's own lines arrive as Python records, level and all, prefix parsed away.
        assert CONNECTED.search(out), out[-1500:]
        assert not CPP_PREFIX.search(out), out[-1500:]


def test_a_process_logs_every_client_line_before_it_exits(
    pulsar_broker: PulsarLiteBroker,
) -> None:
    """A short run whose log handler is slow: the lines still in the pipe at exit are logged
    (they were lost, the connection's and the close's among them)."""
    code, out = run_script(SLOW_HANDLER, pulsar_broker, filled_topic(pulsar_broker, "log-flush"))
    assert code == 0, out[-1500:]
    assert CONNECTED.search(out), out[-1500:]
    assert re.search(r"Closing Pulsar client", out), out[-1500:]


#: `lanehouse up` and the demo start the embedded broker first: its readiness probe is then the
#: process's first Pulsar client, whose logger every later client keeps.
AFTER_EMBEDDED = textwrap.dedent(
    """
    import logging, pulsar
    from consumers.backends.pulsar.client import client_kwargs
    from consumers.dev.embedded.pulsar import start_pulsar_lite
    logging.basicConfig(level=logging.INFO, format="%(name)s %(levelname)s %(message)s")
    broker = start_pulsar_lite()
    try:
        client = pulsar.Client(broker.url, **client_kwargs({}))
        client.subscribe("after-embedded", "s").close()
        client.close()
    finally:
        broker.stop()
    """
)


def test_clients_after_the_embedded_brokers_probe_still_log_through_python() -> None:
    done = subprocess.run(
        [sys.executable, "-c", AFTER_EMBEDDED], cwd=REPO, capture_output=True, timeout=90
    )
    out = (done.stdout + done.stderr).decode(errors="replace")
    assert done.returncode == 0, out[-1500:]
    assert CONNECTED.search(out), out[-1500:]
