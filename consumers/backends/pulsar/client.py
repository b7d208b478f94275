"""How a workload talks to Pulsar: its settings, the client's keyword arguments (a token
becomes authentication), subscription types and initial positions. Pure configuration: the
consumer, the producer and the probe all build their client from here."""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, Final

import pulsar

from consumers.backends.pulsar.client_log import client_logger

SUBSCRIPTION_TYPES: Final[Mapping[str, pulsar.ConsumerType]] = {
    "shared": pulsar.ConsumerType.Shared,
    "failover": pulsar.ConsumerType.Failover,
    "key_shared": pulsar.ConsumerType.KeyShared,
    "exclusive": pulsar.ConsumerType.Exclusive,
}
#: Subscription types where one consumer sees each partition in order, so a cumulative ack of
#: the last message below the position acknowledges the whole prefix in one request.
CUMULATIVE_TYPES: Final = frozenset({"failover", "exclusive"})
INITIAL_POSITIONS: Final[Mapping[str, pulsar.InitialPosition]] = {
    "earliest": pulsar.InitialPosition.Earliest,
    "latest": pulsar.InitialPosition.Latest,
}
PARTITION_SUFFIX: Final = re.compile(r"^(?P<base>.+)-partition-(?P<index>\d+)$")


@dataclass(frozen=True)
class PulsarSettings:
    """Where and how one workload subscribes (built from a ``PulsarSourceSpec``)."""

    service_url: str
    subscription: str
    subscription_type: str = "shared"
    client_options: Mapping[str, Any] = field(default_factory=dict)
    consumer_options: Mapping[str, Any] = field(default_factory=dict)


def client_kwargs(options: Mapping[str, Any]) -> dict[str, Any]:
    """``pulsar.Client`` keyword arguments from spec options (``auth_token`` → authentication)."""
    kwargs = {"logger": client_logger(), **options}
    token = kwargs.pop("auth_token", None)
    if token is not None:
        kwargs["authentication"] = pulsar.AuthenticationToken(token)
    return kwargs
