"""``consumers/backends/metadata.py``: the done offsets above a commit position, as commit metadata.

What must hold for the commit engine: what decodes is exactly what was done (never an offset that
was not, which would skip a record), the text fits Kafka's limit whatever the gaps, and text that
is not ours (another client's metadata, a damaged or hostile value) decodes to nothing, so those
records are replayed rather than skipped.
"""

from __future__ import annotations

import base64
import random
import zlib

from hypothesis import given
from hypothesis import strategies as st

from consumers.backends.metadata import (
    DECODE_MAX_OFFSETS,
    METADATA_MAX_BYTES,
    METADATA_PREFIX,
    decode_done,
    encode_done,
)

positions = st.integers(min_value=0, max_value=2**40)
offsets = st.sets(st.integers(min_value=0, max_value=5_000), max_size=300)


@given(positions, offsets)
def test_what_decodes_is_what_was_done_above_the_position(position: int, done: set[int]) -> None:
    above = {position + o for o in done}
    below = {position - 1 - o for o in done if position - 1 - o >= 0}
    text = encode_done(position, above | below)
    assert decode_done(position, text) == above
    assert (text == "") == (not above)


@given(positions, st.sets(st.integers(min_value=0, max_value=10**7), min_size=1, max_size=3_000))
def test_the_text_fits_and_dropping_runs_only_ever_drops_the_highest(
    position: int, done: set[int]
) -> None:
    """Scattered offsets do not compress: the highest runs go (replayed on a restart) and what
    remains is still exact, the lowest offsets first."""
    above = {position + o for o in done}
    text = encode_done(position, above)
    assert len(text) <= METADATA_MAX_BYTES
    decoded = decode_done(position, text)
    assert decoded <= above
    assert decoded == {o for o in above if o <= max(decoded, default=position - 1)}


def test_two_thousand_random_gaps_keep_the_lowest_offsets_within_the_limit() -> None:
    """Random gaps do not compress: 2,000 runs need about 8 KB, so runs are dropped."""
    draw = random.Random(7)
    scattered, offset = set(), 0
    for _ in range(2_000):
        offset += draw.randint(2, 1_000_000)
        scattered.add(offset)
    text = encode_done(0, scattered)
    decoded = decode_done(0, text)
    assert len(text) <= METADATA_MAX_BYTES and 0 < len(decoded) < len(scattered)
    assert decoded == {o for o in scattered if o <= max(decoded)}


@given(st.text(max_size=200))
def test_text_that_is_not_ours_decodes_to_nothing(text: str) -> None:
    assert decode_done(7, text) == set() or text.startswith(METADATA_PREFIX)
    assert decode_done(7, "other-client:" + text) == set()


def test_damaged_truncated_and_oversized_metadata_decode_to_nothing() -> None:
    good = encode_done(100, {101, 102, 150})
    assert decode_done(100, good) == {101, 102, 150}
    assert decode_done(100, None) == set()
    assert decode_done(100, METADATA_PREFIX + "not base64!") == set()
    assert decode_done(100, good[:-4]) == set()  # base64 cut: zlib refuses the stream
    # A varint cut in the middle: the last byte says "more follows".
    assert decode_done(100, _ours(bytes([0x01, 0x81]))) == set()
    # Runs adding up to more offsets than any real commit holds (another writer, or an attack).
    huge = bytearray()
    for _ in range(3):
        huge += bytes([0x00]) + _varint(DECODE_MAX_OFFSETS // 2)
    assert decode_done(100, _ours(bytes(huge))) == set()


def _ours(raw: bytes) -> str:
    return METADATA_PREFIX + base64.b64encode(zlib.compress(raw)).decode("ascii")


def _varint(value: int) -> bytes:
    out = bytearray()
    while True:
        byte, value = value & 0x7F, value >> 7
        out.append(byte | 0x80 if value else byte)
        if not value:
            return bytes(out)
