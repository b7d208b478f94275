"""The worker-process side of ``executor: process``: receive records, run the handler, reply.

Started as ``python -m consumers.execution.process_worker FD`` with one end of a socket pair, not forked
from the consumer (whose client threads a fork would copy in an unknown state) and not through
``multiprocessing``'s spawn, which runs the consumer's main module again in every worker.
Protocol over that socket, every message a pickle (:mod:`consumers.execution.frames`):

    parent -> worker   sys.path, then the handler (pickled by reference: its import path)
    worker -> parent   ("ready",) once the handler is imported, or ("failed", reason)
    parent -> worker   [(task_id, subject), ...]   a subject is a record's fields, or a list
                                                   of them (batch and unique modes)
                       None                        stop
    worker -> parent   (task_id, ok, result or exception, handler seconds)   one per task

A worker ignores SIGINT: Ctrl-C and Dagster's interrupt go to the consumer, which drains and
then stops its workers; a stray interrupt must not fail the record a worker is running.
"""

from __future__ import annotations

import pickle
import signal
import socket
import sys
import time
import traceback
from typing import Any

from consumers.errors import RemoteError
from consumers.execution import frames
from consumers.record import Record

#: (topic, partition, offset, key, value, headers, timestamp, attempts)
Fields = tuple[str, int, int, bytes | None, bytes | None, Any, int, int]


def record_of(fields: Fields) -> Record:
    rec = Record(*fields[:7])
    rec.attempts = fields[7]
    return rec


def portable(exc: BaseException) -> BaseException:
    """The exception itself if it survives pickling, else a :class:`RemoteError`; either way
    with the worker's traceback as a note (the parent logs it with the record's place)."""
    where = "".join(traceback.format_exception(exc)).rstrip()
    try:
        clone = pickle.loads(pickle.dumps(exc))
    except Exception:
        clone = RemoteError(type(exc).__name__, str(exc))
    if isinstance(clone, BaseException):
        clone.add_note(f"in the worker process:\n{where}")
        return clone
    return RemoteError(type(exc).__name__, str(exc))


def serve(sock: socket.socket) -> None:
    """A worker process's main loop: the parent's ``sys.path``, then the handler (pickled by
    reference, so unpickling imports its module), then tasks until told to stop."""
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    sys.path[:] = frames.receive(sock)
    try:
        handler = frames.receive(sock)
    except EOFError:
        return
    except BaseException as exc:
        reason = "".join(traceback.format_exception_only(exc)).strip()
        frames.send(sock, ("failed", f"cannot import the handler: {reason}"))
        return
    frames.send(sock, ("ready",))
    clock = time.perf_counter
    while True:
        try:
            tasks = frames.receive(sock)
        except EOFError:  # the consumer is gone
            return
        if tasks is None:
            return
        for task_id, subject in tasks:
            started = clock()
            try:
                if isinstance(subject, list):
                    result = handler([record_of(f) for f in subject])
                else:
                    result = handler(record_of(subject))
                reply: tuple[Any, ...] = (task_id, True, result)
            except BaseException as exc:
                reply = (task_id, False, portable(exc))
            reply += (clock() - started,)
            try:
                frames.send(sock, reply)
            except (pickle.PicklingError, TypeError, AttributeError) as exc:
                reason = f"the handler's result cannot be sent back to the consumer: {exc}"
                frames.send(sock, (task_id, False, TypeError(reason), reply[-1]))


if __name__ == "__main__":
    serve(socket.socket(fileno=int(sys.argv[1])))
