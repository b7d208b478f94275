"""Brokers that run on this machine without Docker: Tansu (Kafka API) for tests and demos."""

from __future__ import annotations

from consumers.dev.embedded.tansu import (
    TEST_CLIENT_CONFIG,
    TansuBroker,
    create_topic,
    start_tansu,
)

__all__ = [
    "TEST_CLIENT_CONFIG",
    "TansuBroker",
    "create_topic",
    "start_tansu",
]
