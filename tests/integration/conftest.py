"""Fixtures for the contract suites: one backend parameter, in memory, on Tansu and on pulsar-lite."""

from __future__ import annotations

import pytest

from consumers.dev.embedded.tansu import TansuBroker
from tests.backends import Backend, MemoryBackend, PulsarBackend, TansuBackend


def _backend(request: pytest.FixtureRequest) -> Backend:
    if request.param == "memory":
        return MemoryBackend()
    if request.param == "pulsar":
        return PulsarBackend(request.getfixturevalue("pulsar_broker"))
    broker: TansuBroker = request.getfixturevalue("kafka_broker")
    return TansuBackend(broker)


@pytest.fixture(params=["memory", "tansu", "pulsar"])
def backend(request: pytest.FixtureRequest) -> Backend:
    return _backend(request)


@pytest.fixture(params=["memory", "tansu"])
def kafka_backend(request: pytest.FixtureRequest) -> Backend:
    """In memory and on Tansu: for cases about the handler's side, not the broker's."""
    return _backend(request)
