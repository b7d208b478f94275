"""Fixtures for the contract suites: one backend parameter, in memory, on Tansu and on pulsar-lite."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from consumers.embedded.tansu import TansuBroker
from tests.backends import Backend, MemoryBackend, PulsarBackend, TansuBackend


@pytest.fixture(params=["memory", "tansu", "pulsar"])
def backend(request: pytest.FixtureRequest) -> Iterator[Backend]:
    if request.param == "memory":
        yield MemoryBackend()
    elif request.param == "pulsar":
        yield PulsarBackend(request.getfixturevalue("pulsar_broker"))
    else:
        broker: TansuBroker = request.getfixturevalue("kafka_broker")
        yield TansuBackend(broker)
