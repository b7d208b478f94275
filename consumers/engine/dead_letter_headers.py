"""The headers of a dead-letter record: names, encoding and decoding.

After ``retries.max_attempts`` the engine writes a failed record to its workload's dead-letter
topic. The dead letter keeps the original key, value and headers, and adds the ``lanehouse.*``
headers below (values are UTF-8 bytes; integers in decimal)::

    lanehouse.workload            workload name
    lanehouse.source.topic        where the record was read from
    lanehouse.source.partition
    lanehouse.source.offset
    lanehouse.attempts            handler attempts made
    lanehouse.error.type          exception class name, e.g. "HandlerTimeout"
    lanehouse.error.message       str(exception), at most 1000 characters
    lanehouse.failure.first_ms    epoch milliseconds of the first failed attempt
    lanehouse.failure.last_ms     epoch milliseconds of the last failed attempt
    lanehouse.replay.count        only when the source record was itself a replay

Writers use :func:`encode_dead_letter_headers`; readers (``lanehouse dead-letters``) use
:func:`decode_dead_letter`, and :func:`replay_headers` builds the headers of a republished record.
The reference is ``docs/failure-handling.md``.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from typing import Final

__all__ = [
    "ERROR_MESSAGE_MAX_CHARS",
    "HEADER_ATTEMPTS",
    "HEADER_ERROR_MESSAGE",
    "HEADER_ERROR_TYPE",
    "HEADER_FAILURE_FIRST_MS",
    "HEADER_FAILURE_LAST_MS",
    "HEADER_PREFIX",
    "HEADER_REPLAY_COUNT",
    "HEADER_SOURCE_OFFSET",
    "HEADER_SOURCE_PARTITION",
    "HEADER_SOURCE_TOPIC",
    "HEADER_WORKLOAD",
    "DeadLetterInfo",
    "Headers",
    "decode_dead_letter",
    "encode_dead_letter_headers",
    "replay_headers",
]

#: Every header Lanehouse adds starts with this; original headers never do once encoded.
HEADER_PREFIX: Final = "lanehouse."
HEADER_WORKLOAD: Final = "lanehouse.workload"
HEADER_SOURCE_TOPIC: Final = "lanehouse.source.topic"
HEADER_SOURCE_PARTITION: Final = "lanehouse.source.partition"
HEADER_SOURCE_OFFSET: Final = "lanehouse.source.offset"
HEADER_ATTEMPTS: Final = "lanehouse.attempts"
HEADER_ERROR_TYPE: Final = "lanehouse.error.type"
HEADER_ERROR_MESSAGE: Final = "lanehouse.error.message"
HEADER_FAILURE_FIRST_MS: Final = "lanehouse.failure.first_ms"
HEADER_FAILURE_LAST_MS: Final = "lanehouse.failure.last_ms"
#: How many times the record was replayed from a dead-letter topic; absent means never.
HEADER_REPLAY_COUNT: Final = "lanehouse.replay.count"

#: ``lanehouse.error.message`` is cut to this many characters.
ERROR_MESSAGE_MAX_CHARS: Final = 1000

#: Kafka headers as the engine carries them (:attr:`consumers.record.Record.headers`): ordered
#: ``(name, value)`` pairs, names may repeat. Kafka also allows a null value, which
#: confluent-kafka returns as ``None``; such a header is passed through untouched.
Headers = list[tuple[str, bytes]]


@dataclass(frozen=True, slots=True)
class DeadLetterInfo:
    """What a dead letter's ``lanehouse.*`` headers say, typed.

    ``original_headers`` are the record's own headers (every ``lanehouse.*`` header removed,
    order kept); ``replay_count`` is 0 when the record was never replayed.
    """

    workload: str
    source_topic: str
    source_partition: int
    source_offset: int
    attempts: int
    error_type: str
    error_message: str
    first_failure_ms: int
    last_failure_ms: int
    replay_count: int
    original_headers: tuple[tuple[str, bytes | None], ...]


def encode_dead_letter_headers(
    original: Iterable[tuple[str, bytes]] | None,
    *,
    workload: str,
    source_topic: str,
    source_partition: int,
    source_offset: int,
    attempts: int,
    error_type: str,
    error_message: str,
    first_failure_ms: int,
    last_failure_ms: int,
) -> Headers:
    """The headers of the dead letter for a record that carried ``original`` headers.

    Returns the original headers first, in order, then the ``lanehouse.*`` ones. Any
    ``lanehouse.*`` header the original carried is dropped (a dead letter of a replayed record
    must not keep its previous failure's headers), except ``lanehouse.replay.count``, which is
    carried forward unchanged. ``error_message`` is cut to :data:`ERROR_MESSAGE_MAX_CHARS`.
    A negative number raises ``ValueError`` (it could not be decoded again).
    """
    numbers = {
        HEADER_SOURCE_PARTITION: source_partition,
        HEADER_SOURCE_OFFSET: source_offset,
        HEADER_ATTEMPTS: attempts,
        HEADER_FAILURE_FIRST_MS: first_failure_ms,
        HEADER_FAILURE_LAST_MS: last_failure_ms,
    }
    for name, number in numbers.items():
        if number < 0:
            raise ValueError(f"{name} must not be negative, got {number}")
    headers: Headers = [
        (name, value)
        for name, value in original or ()
        if not name.startswith(HEADER_PREFIX) or name == HEADER_REPLAY_COUNT
    ]
    headers += [
        (HEADER_WORKLOAD, workload.encode()),
        (HEADER_SOURCE_TOPIC, source_topic.encode()),
        (HEADER_SOURCE_PARTITION, b"%d" % source_partition),
        (HEADER_SOURCE_OFFSET, b"%d" % source_offset),
        (HEADER_ATTEMPTS, b"%d" % attempts),
        (HEADER_ERROR_TYPE, error_type.encode()),
        (HEADER_ERROR_MESSAGE, error_message[:ERROR_MESSAGE_MAX_CHARS].encode()),
        (HEADER_FAILURE_FIRST_MS, b"%d" % first_failure_ms),
        (HEADER_FAILURE_LAST_MS, b"%d" % last_failure_ms),
    ]
    return headers


def decode_dead_letter(headers: Iterable[tuple[str, bytes | None]] | None) -> DeadLetterInfo:
    """Read a dead letter's headers; ``ValueError`` naming the header if one is missing or bad.

    Where a header repeats, the last value counts (as in :meth:`consumers.record.Record.header`).
    """
    pairs = list(headers or ())
    last: dict[str, bytes | None] = {}
    for name, value in pairs:
        if name.startswith(HEADER_PREFIX):
            last[name] = value

    def text(name: str) -> str:
        if name not in last:
            raise ValueError(f"not a dead letter: header {name!r} is missing")
        value = last[name]
        if value is None:
            raise ValueError(f"malformed dead letter: header {name!r} is null")
        try:
            return value.decode()
        except UnicodeDecodeError as exc:
            raise ValueError(f"malformed dead letter: header {name!r} is not UTF-8") from exc

    def integer(name: str) -> int:
        raw = text(name)
        if not raw.isascii() or not raw.isdecimal():
            raise ValueError(
                f"malformed dead letter: header {name!r} is {raw[:40]!r}, not a non-negative integer"
            )
        return int(raw)

    return DeadLetterInfo(
        workload=text(HEADER_WORKLOAD),
        source_topic=text(HEADER_SOURCE_TOPIC),
        source_partition=integer(HEADER_SOURCE_PARTITION),
        source_offset=integer(HEADER_SOURCE_OFFSET),
        attempts=integer(HEADER_ATTEMPTS),
        error_type=text(HEADER_ERROR_TYPE),
        error_message=text(HEADER_ERROR_MESSAGE),
        first_failure_ms=integer(HEADER_FAILURE_FIRST_MS),
        last_failure_ms=integer(HEADER_FAILURE_LAST_MS),
        replay_count=integer(HEADER_REPLAY_COUNT) if HEADER_REPLAY_COUNT in last else 0,
        original_headers=tuple(
            (name, value) for name, value in pairs if not name.startswith(HEADER_PREFIX)
        ),
    )


def replay_headers(info: DeadLetterInfo) -> list[tuple[str, bytes | None]]:
    """Headers of the record republished from a dead letter: the original headers plus
    ``lanehouse.replay.count`` one higher than the dead letter's."""
    return [*info.original_headers, (HEADER_REPLAY_COUNT, b"%d" % (info.replay_count + 1))]
