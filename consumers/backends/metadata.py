"""The commit-metadata codec: completed offsets above a committed position, as text a broker
keeps beside the position (Kafka's commit metadata; the Pulsar adapter reads it to acknowledge
the done messages above the position).

A restart decodes it and skips those records. Where a broker drops the metadata (Tansu), a
restart simply replays them: duplicates, never loss.
"""

from __future__ import annotations

import base64
import zlib
from collections.abc import Iterable

METADATA_PREFIX = "lh1:"
#: Kafka's default ``offset.metadata.max.bytes`` is 4096; stay well under it.
METADATA_MAX_BYTES = 3000


def encode_done(position: int, done: Iterable[int]) -> str:
    """Encode completed offsets above ``position`` as compact commit metadata.

    Offsets become (gap, run-length) pairs relative to ``position``, as varints, zlib'd and
    base64'd. If the result would exceed :data:`METADATA_MAX_BYTES`, the highest runs are dropped:
    that only means more replays on restart, never a loss.
    """
    runs: list[tuple[int, int]] = []
    prev = position
    for offset in sorted(set(done)):
        if offset < position:
            continue
        if runs and offset == prev:
            start, length = runs[-1]
            runs[-1] = (start, length + 1)
        else:
            runs.append((offset - prev, 1))
        prev = offset + 1
    while True:
        raw = bytearray()
        for gap, length in runs:
            _put_varint(raw, gap)
            _put_varint(raw, length)
        text = METADATA_PREFIX + base64.b64encode(zlib.compress(bytes(raw))).decode("ascii")
        if len(text) <= METADATA_MAX_BYTES or not runs:
            return text if runs else ""
        runs = runs[: len(runs) * 3 // 4]


#: More done offsets than this in metadata means it is not ours: ignore it (replay).
DECODE_MAX_OFFSETS = 1_000_000


def decode_done(position: int, metadata: str | None) -> set[int]:
    """Inverse of :func:`encode_done`; unknown, damaged or implausibly large metadata decodes
    to nothing (those records are replayed)."""
    if not metadata or not metadata.startswith(METADATA_PREFIX):
        return set()
    try:
        raw = zlib.decompress(base64.b64decode(metadata[len(METADATA_PREFIX) :], validate=True))
    except (ValueError, zlib.error):
        return set()
    done: set[int] = set()
    cursor = position
    i = 0
    try:
        while i < len(raw):
            gap, i = _get_varint(raw, i)
            length, i = _get_varint(raw, i)
            start = cursor + gap
            if len(done) + length > DECODE_MAX_OFFSETS:
                return set()
            done.update(range(start, start + length))
            cursor = start + length
    except IndexError:
        return set()
    return done


def _put_varint(out: bytearray, value: int) -> None:
    while True:
        byte = value & 0x7F
        value >>= 7
        if value:
            out.append(byte | 0x80)
        else:
            out.append(byte)
            return


def _get_varint(data: bytes, i: int) -> tuple[int, int]:
    shift = 0
    value = 0
    while True:
        byte = data[i]
        i += 1
        value |= (byte & 0x7F) << shift
        if not byte & 0x80:
            return value, i
        shift += 7
