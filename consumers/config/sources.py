"""Where a workload reads from: the Kafka and Pulsar source models of a spec, and the rule for
client properties wherever they are written (a source, a named cluster, an output or dead
letter): checked key by key; secrets kept as ``SecretStr``, masked wherever a spec or the
platform config is printed, revealed only for the client."""

from __future__ import annotations

import functools
from collections.abc import Callable, Mapping
from typing import Annotated, Any, Literal

from pydantic import AfterValidator, BeforeValidator, Field, SecretStr, field_validator

from consumers.config.loading import FrozenModel
from consumers.config.names import Name, validate_topic_name
from consumers.config.pulsar_options import CLIENT_OPTIONS as PULSAR_CLIENT_OPTIONS
from consumers.config.pulsar_options import CONSUMER_OPTIONS as PULSAR_CONSUMER_OPTIONS
from consumers.config.pulsar_options import (
    check_pulsar_option,
    check_pulsar_producer_option,
    validate_pulsar_topic,
    validate_pulsar_url,
)

_SECRET_MARKERS = ("password", "secret", "sasl.oauthbearer", "token")
_RESERVED_KEYS = {
    "enable.auto.commit": "the engine commits an offset only once its record's outcome is durable; auto-commit would commit records still in flight and lose them on a crash",
    "enable.auto.offset.store": "the engine stores offsets itself from its contiguous completed watermark; automatic storing would skip records still in flight",
    "group.id": "set source.group instead (default 'lanehouse.<name>')",
    "bootstrap.servers": "set source.bootstrap_servers (or a cluster's bootstrap_servers in lanehouse.yaml) instead",
}


ConfigValue = str | int | float | bool | SecretStr


def is_secret_key(key: str) -> bool:
    """True for client properties whose value must never be printed (passwords, secrets, tokens)."""
    lowered = key.lower()
    return any(marker in lowered for marker in _SECRET_MARKERS)


def _check_client_config(config: Any, check: Callable[[str, Any], None]) -> Any:
    if not isinstance(config, dict):
        return config  # pydantic reports the type error
    for key, value in config.items():
        if not isinstance(key, str) or not key:
            raise ValueError(f"property names must be non-empty strings, got {key!r}")
        check(key, value)
        if not isinstance(value, str | int | float | bool | SecretStr):
            raise ValueError(f"value of {key!r} must be a string, number or boolean")
    return config


def _mask_secrets(config: dict[str, ConfigValue]) -> dict[str, ConfigValue]:
    return {
        key: SecretStr(str(value))
        if is_secret_key(key) and not isinstance(value, SecretStr)
        else value
        for key, value in config.items()
    }


def reveal(config: Mapping[str, ConfigValue]) -> dict[str, str | int | float | bool]:
    return {
        key: value.get_secret_value() if isinstance(value, SecretStr) else value
        for key, value in config.items()
    }


def _check_kafka_key(key: str, _value: object) -> None:
    if key in _RESERVED_KEYS:
        raise ValueError(f"{key!r} is owned by the engine and cannot be set: {_RESERVED_KEYS[key]}")


def _no_check(_key: str, _value: object) -> None:
    """Keys checked later, against the kind of the cluster they go to."""


def _checked(check: Callable[[str, Any], None]) -> BeforeValidator:
    return BeforeValidator(functools.partial(_check_client_config, check=check))


_Properties = dict[str, ConfigValue]
#: librdkafka properties (a source's, a cluster's and its producers'); engine-owned keys refused.
KafkaProperties = Annotated[_Properties, _checked(_check_kafka_key), AfterValidator(_mask_secrets)]
#: pulsar-client options of a source or a cluster (client and subscribe options).
PulsarOptions = Annotated[_Properties, _checked(check_pulsar_option), AfterValidator(_mask_secrets)]
#: pulsar-client options of a cluster's producers (client and producer options).
PulsarProducerOptions = Annotated[
    _Properties, _checked(check_pulsar_producer_option), AfterValidator(_mask_secrets)
]
#: Producer properties of an output or dead letter; the workload checks them against its kind.
SinkProperties = Annotated[_Properties, _checked(_no_check), AfterValidator(_mask_secrets)]


def check_sink_property(kind: str, key: str, value: object) -> None:
    """Raise ``ValueError`` unless ``key: value`` may be set on a producer of this kind."""
    if kind == "kafka":
        _check_kafka_key(key, value)
    else:
        check_pulsar_producer_option(key, value)


def _unique_topics(topics: tuple[str, ...]) -> None:
    if not topics:
        raise ValueError("at least one topic is required")
    if len(set(topics)) != len(topics):
        raise ValueError("a topic is listed more than once")


class _SourceBase(FrozenModel):
    """What every source kind has: the named cluster it reads from (None: inline servers)."""

    #: Resolved from the platform config when the spec was loaded (``consumers.config.clusters``).
    cluster: Name | None = None


class KafkaSourceSpec(_SourceBase):
    """The Kafka cluster, topics and consumer group a workload reads from."""

    kind: Literal["kafka"]
    bootstrap_servers: str = Field(min_length=1)
    topics: tuple[str, ...]
    group: str = Field(min_length=1)
    config: KafkaProperties = Field(default_factory=dict)

    @field_validator("topics")
    @classmethod
    def _check_topics(cls, topics: tuple[str, ...]) -> tuple[str, ...]:
        _unique_topics(topics)
        for topic in topics:
            validate_topic_name(topic)
        return topics

    def topic_name(self, topic: str) -> str:
        """Validate an output or dead-letter topic for this cluster."""
        return validate_topic_name(topic)


class PulsarSourceSpec(_SourceBase):
    """The Pulsar service, topics and subscription a workload reads from.

    Topics are stored by their full name (``persistent://tenant/namespace/topic``): that is what
    handlers see in ``record.topic`` and what metrics are labelled with.
    """

    kind: Literal["pulsar"]
    service_url: str = Field(min_length=1)
    topics: tuple[str, ...]
    subscription: str = Field(min_length=1)
    subscription_type: Literal["shared", "failover", "key_shared", "exclusive"] = "shared"
    config: PulsarOptions = Field(default_factory=dict)

    @field_validator("service_url")
    @classmethod
    def _check_url(cls, url: str) -> str:
        return validate_pulsar_url(url)

    @field_validator("topics")
    @classmethod
    def _check_topics(cls, topics: tuple[str, ...]) -> tuple[str, ...]:
        full = tuple(validate_pulsar_topic(topic) for topic in topics)
        _unique_topics(full)
        return full

    def topic_name(self, topic: str) -> str:
        """Validate an output or dead-letter topic for this service (returns its full name)."""
        return validate_pulsar_topic(topic)

    def client_options(self) -> dict[str, str | int | float | bool]:
        """``pulsar.Client`` keyword options, secrets revealed: give them only to the client."""
        return {k: v for k, v in reveal(self.config).items() if k in PULSAR_CLIENT_OPTIONS}

    def consumer_options(self) -> dict[str, str | int | float | bool]:
        """``Client.subscribe`` keyword options (``initial_position`` still a string)."""
        return {k: v for k, v in reveal(self.config).items() if k in PULSAR_CONSUMER_OPTIONS}


SourceSpec = Annotated[KafkaSourceSpec | PulsarSourceSpec, Field(discriminator="kind")]
