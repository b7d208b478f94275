"""``consumers/execution/frames.py``: length-prefixed pickles between the consumer and its worker
processes. Frames split over reads come out whole and in order; a frame that cannot be unpickled
here comes out as an ``UnreadableFrame`` in its place, once, and the frames after it still come.
"""

from __future__ import annotations

import pickle
import socket

import pytest

from consumers.execution import frames


class NeedsTwo(Exception):
    """Pickles as ``NeedsTwo(a)`` (its ``args``), so loading it fails: a classic of user code."""

    def __init__(self, a: int, b: int) -> None:
        super().__init__(a)
        self.b = b


def frame(message: object) -> bytes:
    data = pickle.dumps(message, protocol=pickle.HIGHEST_PROTOCOL)
    return len(data).to_bytes(8, "big") + data


def test_frames_split_anywhere_come_out_whole_and_in_order() -> None:
    stream = b"".join(frame((n, True, "x" * n, 0.0)) for n in range(50))
    reader = frames.FrameReader()
    got: list[object] = []
    for cut in range(0, len(stream), 7):  # 7-byte reads split headers and bodies alike
        got += reader.feed(stream[cut : cut + 7])
    assert got == [(n, True, "x" * n, 0.0) for n in range(50)]


def test_an_unreadable_frame_takes_its_place_once_and_the_next_ones_still_come() -> None:
    reader = frames.FrameReader()
    first = reader.feed(frame((1, True, "a", 0.0)) + frame((2, True, NeedsTwo(1, 2), 0.0)))
    assert first[0] == (1, True, "a", 0.0)
    assert isinstance(first[1], frames.UnreadableFrame)
    assert "TypeError" in first[1].reason and "'b'" in first[1].reason
    assert reader.feed(frame((3, True, "c", 0.0))) == [(3, True, "c", 0.0)]


def test_send_and_receive_over_a_socket_pair() -> None:
    ours, theirs = socket.socketpair()
    with ours, theirs:
        frames.send(ours, {"sys.path": ["/x"]})
        assert frames.receive(theirs) == {"sys.path": ["/x"]}
        ours.close()
        with pytest.raises(EOFError, match="closed"):
            frames.receive(theirs)
