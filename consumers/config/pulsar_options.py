"""Which ``config`` keys a Pulsar source or cluster may set, and where each one goes.

pulsar-client takes its options as keyword arguments of ``pulsar.Client(...)``,
``Client.subscribe(...)`` and ``Client.create_producer(...)``; a spec names them the same way. Keys the engine owns are refused with
the reason, unknown keys are refused with the list of known ones, so a typo never silently
becomes a default. Pure data: importing this module does not import pulsar-client.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from typing import Final

_TOPIC_PART = re.compile(r"[a-zA-Z0-9._-]+")

#: ``pulsar.Client`` keyword arguments a spec may set, with their YAML type.
CLIENT_OPTIONS: Final[Mapping[str, type]] = {
    "operation_timeout_seconds": int,
    "io_threads": int,
    "concurrent_lookup_requests": int,
    "stats_interval_in_seconds": int,
    "connection_timeout_ms": int,
    "use_tls": bool,
    "tls_trust_certs_file_path": str,
    "tls_allow_insecure_connection": bool,
    "tls_validate_hostname": bool,
    "tls_private_key_file_path": str,
    "tls_certificate_file_path": str,
    "listener_name": str,
    # Not a client argument: becomes ``authentication=pulsar.AuthenticationToken(value)``.
    "auth_token": str,
}

#: ``Client.subscribe`` keyword arguments a spec may set, with their YAML type.
CONSUMER_OPTIONS: Final[Mapping[str, type]] = {
    "receiver_queue_size": int,
    "max_total_receiver_queue_size_across_partitions": int,
    "consumer_name": str,
    "negative_ack_redelivery_delay_ms": int,
    "broker_consumer_stats_cache_time_ms": int,
    "is_read_compacted": bool,
    "replicate_subscription_state_enabled": bool,
    "max_pending_chunked_message": int,
    "auto_ack_oldest_chunked_message_on_queue_full": bool,
    "batch_index_ack_enabled": bool,
    # ``earliest`` (the engine's default, like Kafka's auto.offset.reset) or ``latest``.
    "initial_position": str,
}

#: ``Client.create_producer`` keyword arguments a cluster's ``producer`` (or an output's or dead
#: letter's ``config``) may set, with their YAML type.
PRODUCER_OPTIONS: Final[Mapping[str, type]] = {
    "send_timeout_millis": int,
    "batching_max_messages": int,
    "batching_max_allowed_size_in_bytes": int,
    "batching_max_publish_delay_ms": int,
}

INITIAL_POSITIONS: Final = ("earliest", "latest")

#: Keys only the engine sets, and why.
ENGINE_OWNED: Final[Mapping[str, str]] = {
    "service_url": "set source.service_url instead",
    "topic": "set source.topics instead",
    "subscription_name": "set source.subscription instead",
    "consumer_type": "set source.subscription_type instead",
    "message_listener": "the engine receives in batches on its own thread",
    "batch_receive_policy": "the engine receives in batches on its own thread",
    "schema": "handlers receive the raw bytes; decode them in the handler",
    "unacked_messages_timeout_ms": "the engine acknowledges a message only once its outcome is durable; an ack timeout would redeliver records still in flight",
    "dead_letter_policy": "set dead_letter in the spec: the engine writes dead letters after its own retries, keeping key order",
    "authentication": "set auth_token (a secret) instead",
    "logger": "the engine routes client logs itself",
    "block_if_queue_full": "the engine never blocks on a full send queue; it retries shortly",
    "max_pending_messages": "the engine bounds unacknowledged sends itself",
    "batching_enabled": "the engine batches outputs and sends dead letters unbatched (in chunks when over the broker's limit)",
}


def check_pulsar_option(key: str, value: object) -> None:
    """Raise ``ValueError`` (the reason, never the value) unless ``key: value`` is allowed for a
    consumer's client (a source's or a cluster's ``config``)."""
    _check(key, value, {**CLIENT_OPTIONS, **CONSUMER_OPTIONS})


def check_pulsar_producer_option(key: str, value: object) -> None:
    """Like :func:`check_pulsar_option`, for a producer's client (a cluster's ``producer``)."""
    _check(key, value, {**CLIENT_OPTIONS, **PRODUCER_OPTIONS})


def _check(key: str, value: object, allowed: Mapping[str, type]) -> None:
    if key in ENGINE_OWNED:
        raise ValueError(f"{key!r} is owned by the engine and cannot be set: {ENGINE_OWNED[key]}")
    expected = allowed.get(key)
    if expected is None:
        known = ", ".join(sorted(allowed))
        raise ValueError(f"unknown Pulsar option {key!r}; allowed: {known}")
    if key == "initial_position" and value not in INITIAL_POSITIONS:
        raise ValueError("initial_position must be 'earliest' or 'latest'")
    if expected is int and (isinstance(value, bool) or not isinstance(value, int)):
        raise ValueError(f"value of {key!r} must be an integer")
    if expected is bool and not isinstance(value, bool):
        raise ValueError(f"value of {key!r} must be true or false")
    if expected is str and not isinstance(value, str):
        raise ValueError(f"value of {key!r} must be a string")


def validate_pulsar_url(url: str) -> str:
    """Return ``url`` if it is a Pulsar service URL; raise ``ValueError`` saying why not."""
    if not url.startswith(("pulsar://", "pulsar+ssl://")):
        raise ValueError(
            f"{url!r} is not a Pulsar service URL (pulsar://HOST:PORT or pulsar+ssl://HOST:PORT)"
        )
    return url


def validate_pulsar_topic(topic: str) -> str:
    """Return the full name of ``topic``; raise ``ValueError`` saying why it is invalid.

    Accepts ``persistent://tenant/namespace/topic`` or a short ``topic`` (expanded to
    ``persistent://public/default/topic``); each part must match ``[a-zA-Z0-9._-]+``.
    """
    if not isinstance(topic, str) or not topic:
        raise ValueError(f"invalid Pulsar topic {topic!r}: must be a non-empty string")
    scheme, sep, rest = topic.partition("://")
    if not sep:
        scheme, rest = "persistent", f"public/default/{topic}"
    parts = rest.split("/")
    if scheme != "persistent" or len(parts) != 3:
        raise ValueError(
            f"invalid Pulsar topic {topic!r}: expected 'persistent://tenant/namespace/topic' "
            "or a short name without '/'"
        )
    for label, part in zip(("tenant", "namespace", "topic"), parts, strict=True):
        if not _TOPIC_PART.fullmatch(part):
            raise ValueError(
                f"invalid Pulsar topic {topic!r}: {label} {part!r} must be non-empty ASCII "
                "letters, digits, '.', '_' or '-'"
            )
    return f"persistent://{rest}"
