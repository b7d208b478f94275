"""Fixtures for the contract suites: one backend parameter, in memory and on Tansu."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from consumers.embedded.tansu import TansuBroker
from tests.backends import Backend, MemoryBackend, TansuBackend


@pytest.fixture(params=["memory", "tansu"])
def backend(request: pytest.FixtureRequest) -> Iterator[Backend]:
    if request.param == "memory":
        yield MemoryBackend()
    else:
        broker: TansuBroker = request.getfixturevalue("kafka_broker")
        yield TansuBackend(broker)
