"""Length-prefixed pickles over a stream socket: how the consumer and its handler worker
processes talk (``executor: process``).

Not ``multiprocessing.connection``: its ``poll`` builds a selector per call and its receive
reads header and body separately, which cost the consumer more per record than the handler
it hands off. Here the consumer reads whatever the socket holds in one ``recv`` and takes every
complete frame out of it; a worker, which has nothing else to do, reads frame by frame.
"""

from __future__ import annotations

import pickle
import socket
from typing import Any

_HEADER = 8  # big-endian length of the pickle that follows


def send(sock: socket.socket, message: Any) -> None:
    """Send one message (blocking), header and body in one system call."""
    data = pickle.dumps(message, protocol=pickle.HIGHEST_PROTOCOL)
    sock.sendall(len(data).to_bytes(_HEADER, "big") + data)


def _read_exactly(sock: socket.socket, size: int) -> bytearray:
    buffer = bytearray(size)
    view, got = memoryview(buffer), 0
    while got < size:
        n = sock.recv_into(view[got:])
        if n == 0:
            raise EOFError("the other side closed the socket")
        got += n
    return buffer


def receive(sock: socket.socket) -> Any:
    """Read one whole message, blocking; EOFError when the other side is gone."""
    size = int.from_bytes(_read_exactly(sock, _HEADER), "big")
    return pickle.loads(_read_exactly(sock, size))


class UnreadableFrame:
    """In place of a complete frame whose pickle cannot be loaded here: ``reason`` says why.
    The frame is consumed, so the messages after it are read on (a bad frame kept at the head
    of the buffer would fail every later read, and every call behind it would wait forever)."""

    __slots__ = ("reason",)

    def __init__(self, reason: str) -> None:
        self.reason = reason


class FrameReader:
    """The consumer's side: feed it what one ``recv`` returned, take the complete messages
    (an :class:`UnreadableFrame` for each that cannot be unpickled)."""

    __slots__ = ("_buffer",)

    def __init__(self) -> None:
        self._buffer = bytearray()

    def feed(self, data: bytes) -> list[Any]:
        buffer = self._buffer
        buffer += data
        messages = []
        start = 0
        while len(buffer) - start >= _HEADER:
            size = int.from_bytes(buffer[start : start + _HEADER], "big")
            end = start + _HEADER + size
            if end > len(buffer):
                break
            try:
                messages.append(pickle.loads(memoryview(buffer)[start + _HEADER : end]))
            except Exception as exc:  # the class is unknown here, or its __reduce__ lies
                messages.append(UnreadableFrame(f"{type(exc).__name__}: {exc}"))
            start = end
        if start:
            del buffer[:start]
        return messages
