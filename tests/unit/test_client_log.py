"""``consumers/backends/pulsar/client_log.py``: the C++ client's lines become records of the
``lanehouse.pulsar.client`` logger with their level (the process-level behaviour, a clean exit
included, is ``tests/integration/test_pulsar_client_log.py``)."""

from __future__ import annotations

import logging

import pytest

from consumers.backends.pulsar import client_log

pytestmark = pytest.mark.unit


@pytest.mark.parametrize(
    ("line", "level", "message"),
    [
        (
            b"2026-11-27 08:59:01.713 INFO  [139838953544576] ClientImpl:802 | Closing client\n",
            logging.INFO,
            "Closing client",
        ),
        (  # libc++ (macOS) prints thread ids in hex
            b"2026-11-27 08:59:01.713 WARN  [0x10a951e00] ConsumerImpl:12 | [t, s, 0] slow\n",
            logging.WARNING,
            "[t, s, 0] slow",
        ),
        (
            b"2026-11-27 08:59:01.713 ERROR [7] ClientConnection:1 | refused\n",
            logging.ERROR,
            "refused",
        ),
        (  # two threads' text interleaved: kept whole
            b"2026-11-27 08:59:01.713 INFO  [7] X2026-11-27 08:59:01.713 INFO\n",
            logging.INFO,
            "2026-11-27 08:59:01.713 INFO  [7] X2026-11-27 08:59:01.713 INFO",
        ),
    ],
)
def test_a_line_becomes_a_record_with_its_level(
    caplog: pytest.LogCaptureFixture, line: bytes, level: int, message: str
) -> None:
    caplog.set_level(logging.DEBUG, logger="lanehouse.pulsar.client")
    client_log._log(line)
    [record] = caplog.records
    assert (record.name, record.levelno, record.getMessage()) == (
        "lanehouse.pulsar.client",
        level,
        message,
    )
