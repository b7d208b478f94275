"""``lanehouse shop`` on a real broker: demo clicks sent live, every one acknowledged by Ctrl-C.

Orders come minutes into a session (after views and carts), so a test of seconds sees none;
their routing is covered by the unit tests of ``run_live_shop`` and the Pulsar sink by the demo.
"""

from __future__ import annotations

import json
import re
import signal
import subprocess
import sys
import uuid
from pathlib import Path

from consumers.dev.embedded.tansu import TansuBroker
from orchestration.demo import events as demo
from orchestration.demo.producers import FLUSH_TIMEOUT
from tests.backends import TansuBackend
from tests.helpers import wait_until

SUMMARY = re.compile(r"sent (\d+) clicks and (\d+) orders \((\d+) malformed\)")


def test_shop_sends_demo_clicks_until_interrupted(
    kafka_broker: TansuBroker, tmp_path: Path
) -> None:
    topic = f"shop-clicks-{uuid.uuid4().hex[:8]}"
    command = [sys.executable, "-m", "orchestration.cli", "shop", "--clicks-topic", topic]
    command += ["--bootstrap", kafka_broker.bootstrap, "--rate", "200", "--partitions", "2"]
    command += ["--malformed", "0.1"]
    out = tmp_path / "shop.out"
    kafka = TansuBackend(kafka_broker)
    with out.open("wb") as sink:
        proc = subprocess.Popen(command, stdout=sink, stderr=subprocess.STDOUT)
    try:
        wait_until(
            lambda: sum(map(len, kafka.read(topic, 2))) >= 300,
            timeout=60,
            message="the shop sent no clicks",
        )
        proc.send_signal(signal.SIGINT)
        # It flushes for at most FLUSH_TIMEOUT: a CI run under load saw it still flushing 30 s
        # after the signal; past its own bound it is stuck, and fails here.
        assert proc.wait(timeout=FLUSH_TIMEOUT + 15) == 0, out.read_text()
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    match = SUMMARY.search(out.read_text())
    assert match, out.read_text()
    clicks_sent, orders_sent, malformed = map(int, match.groups())
    assert orders_sent == 0, "no orders topic was named"
    clicks = [m for part in kafka.read(topic, 2) for m in part]
    assert len(clicks) == clicks_sent >= 300, "every click sent arrived"
    assert malformed == int(0.1 * clicks_sent + 1e-9)
    well_formed = []
    for message in clicks:
        assert message.value is not None
        try:
            body = json.loads(message.value)
        except ValueError:  # the not_json and invalid_utf8 defects
            continue
        if set(demo.CLICK_REQUIRED) <= body.keys() and body["event_type"] in demo.EVENT_TYPES:
            assert message.key == body["user_id"].encode()
            well_formed.append(body)
    assert len(well_formed) >= clicks_sent - malformed
