"""pulsar-client's own log lines, carried into the ``lanehouse.pulsar.client`` Python logger
through a pipe rather than through the client's Python-logger hook.

Why not ``pulsar.Client(logger=logging.Logger)``: that hook keeps a Python object in each C++
thread's logger, and a client thread that ends while the interpreter is finalizing aborts the
process ("terminate called without an active exception", exit -6) after a clean shutdown:
15 of 30 short runs here with pulsar-client 3.13, and 1 of 40 ``lanehouse consume`` runs
(apache/pulsar-client-python#256, open). The client's C++ file logger holds no Python object:
it writes into this process's pipe, and one daemon thread turns the lines into log records.

pulsar-client keeps one logger for the whole process, the first client's: the level is the Python
logger's when the first client is built (a process whose first client is another, such as the
embedded broker's readiness probe, keeps that one's), and a forked child's lines reach its
parent's thread. At exit the process waits (up to :data:`FLUSH_SECONDS`) until the thread has
logged every line already in the pipe: a loaded machine had left a short run's thread behind,
and the lines lost were the connection's and the close's. The C++ file logger writes without a
lock, so two client threads logging at once may interleave their text; such a line is kept whole
at INFO rather than parsed.
"""

from __future__ import annotations

import atexit
import logging
import os
import re
import sys
import threading
from typing import Final

import pulsar

#: pulsar-client's own (C++) log lines go here instead of stdout.
CLIENT_LOGGER: Final = logging.getLogger("lanehouse.pulsar.client")

#: ``2026-11-27 08:59:01.713 INFO  [1398] ClientImpl:802 | Closing Pulsar client``
_LINE: Final = re.compile(rb"^\S+ \S+ (?P<level>[A-Z]+)\s+\[[^\]]*\] \S+ \| ?(?P<message>.*)$")
_LEVELS: Final = {
    b"DEBUG": logging.DEBUG,
    b"INFO": logging.INFO,
    b"WARN": logging.WARNING,
    b"ERROR": logging.ERROR,
}


#: Longest the process waits at exit for the lines already in the pipe to be logged.
FLUSH_SECONDS: Final = 2.0
#: Written behind those lines; the thread sets ``_Pipe.flushed`` when it reads it.
_FLUSH: Final = b"\x00lanehouse: flush\n"


class _Pipe:
    """The process's pipe and the thread that reads it."""

    def __init__(self) -> None:
        read, self.write = os.pipe()
        self._pid = os.getpid()
        self.flushed = threading.Event()
        threading.Thread(
            target=self._forward, args=(read,), name="pulsar-client-log", daemon=True
        ).start()
        atexit.register(self.flush)

    def flush(self, timeout: float = FLUSH_SECONDS) -> bool:
        """Wait until the lines in the pipe now are logged; False if ``timeout`` ran out. A
        forked child has no reader of its own (its lines go to its parent's): it returns."""
        if os.getpid() != self._pid:
            return False
        self.flushed.clear()
        try:
            os.write(self.write, _FLUSH)  # one write under PIPE_BUF: never split
        except OSError:
            return False
        return self.flushed.wait(timeout)

    def _forward(self, read: int) -> None:
        """Never stops while the process lives: a dead reader would fill the pipe and block
        every client thread that logs."""
        with os.fdopen(read, "rb") as lines:
            for line in lines:
                flush = line.endswith(_FLUSH)  # a client's unfinished text may precede it
                if flush:
                    line = line[: -len(_FLUSH)]
                if line:
                    try:
                        _log(line)
                    except Exception:  # a handler or filter failing: the line is lost, not the pipe
                        sys.stderr.write(line.decode(errors="replace"))
                if flush:
                    self.flushed.set()


def _log(line: bytes) -> None:
    match = _LINE.match(line.rstrip(b"\n"))
    if match is None:  # a line the format above does not describe: keep it whole
        CLIENT_LOGGER.info("%s", line.decode(errors="replace").rstrip())
        return
    level = _LEVELS.get(match["level"], logging.INFO)
    CLIENT_LOGGER.log(level, "%s", match["message"].decode(errors="replace"))


_pipe: _Pipe | None = None
_lock = threading.Lock()


def client_logger() -> pulsar.FileLogger:
    """The ``logger=`` of every ``pulsar.Client`` Lanehouse builds: the C++ file logger on this
    process's pipe, at the Python logger's level when the client is built."""
    global _pipe
    with _lock:
        if _pipe is None:
            _pipe = _Pipe()
        path = f"/dev/fd/{_pipe.write}"
    return pulsar.FileLogger(_client_level(CLIENT_LOGGER.getEffectiveLevel()), path)


def _client_level(level: int) -> pulsar.LoggerLevel:
    if level <= logging.DEBUG:
        return pulsar.LoggerLevel.Debug
    if level <= logging.INFO:
        return pulsar.LoggerLevel.Info
    if level <= logging.WARNING:
        return pulsar.LoggerLevel.Warn
    return pulsar.LoggerLevel.Error
