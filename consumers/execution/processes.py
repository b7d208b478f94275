"""``executor: process``: a plain ``def`` handler in a pool of worker processes, for CPU-bound
work that one interpreter's GIL would serialize.

Key order needs nothing here: a lane hands out one record at a time and waits for its result,
so two records of one key are never in two processes at once, while records of other keys fill
every worker (no head-of-line blocking across keys, unlike a pool that keeps arrival order).

Hand-off: the event loop sends each worker a few records at a time over its socket (a window
sized to about :data:`WINDOW_SECONDS` of the handler's measured work, so a fast handler is not
paid for one round trip a record and a slow one never waits behind another's queue) and reads
replies, one per record, when the socket is readable (``loop.add_reader``). A worker is sent
more only while what it has not answered fits in the socket's buffer (:data:`MAX_UNANSWERED_BYTES`,
or one call of any size when it has nothing else), so a send never blocks the loop and the two
sides can never both wait to write.

Failures, per record, so the caller retries or dead-letters as for any handler error:
- the handler raised: its exception comes back (or a :class:`RemoteError` naming its type);
- a record over ``max_bytes`` is refused before it is sent (:class:`HandoffTooLarge`);
- the worker died (a crash, ``os._exit``, the OOM killer): the record it was running fails with
  :class:`WorkerDied`, the records queued behind it go to other workers, a new worker starts;
- a timeout, counted from when the worker starts the record (not while it waits in a window
  behind a slow one): the worker is killed and replaced, the records queued behind go to the
  other workers; a record that timed out while still queued here is skipped.

Workers are fresh interpreters (``python -m consumers.execution.process_worker``, see there why): at start
the executor waits until each has imported the handler, so a handler that cannot load fails
the workload at once; a replacement starts without blocking the loop and gets work when ready.
"""

from __future__ import annotations

import asyncio
import contextlib
import itertools
import logging
import socket
import subprocess
import sys
from collections import deque
from collections.abc import Awaitable, Callable
from typing import Any

from consumers.errors import HandoffTooLarge, ProcessExecutorError, ReplyUnreadable, WorkerDied
from consumers.execution import frames
from consumers.execution.executors import Handler, process_problem
from consumers.record import Record

log = logging.getLogger("lanehouse.engine")

#: Work queued per worker, in seconds of measured handler time (at least one record).
WINDOW_SECONDS = 0.002
#: The largest window, in records.
MAX_WINDOW = 32
#: Bytes of records a worker may hold unanswered (well below a socket buffer's ~200 KB).
MAX_UNANSWERED_BYTES = 64 * 1024
#: How long a worker may take to import the handler at start.
START_TIMEOUT = 60.0
#: The wait before starting a worker again after a replacement failed to start.
RESTART_DELAY = 1.0


class ProcessCall:
    """One record (or batch) handed to the pool; ``future`` resolves with the result."""

    __slots__ = ("future", "on_start", "payload", "running", "size", "task_id", "worker")

    def __init__(self, task_id: int, payload: Any, size: int, future: asyncio.Future[Any]) -> None:
        self.task_id = task_id
        self.payload = payload
        self.size = size
        self.future = future
        self.worker: _Worker | None = None
        self.running = False
        #: Called when a worker starts running it (it may have waited in that worker's window):
        #: the timeout counts the handler's time, not the wait behind another record.
        self.on_start: Callable[[], None] | None = None

    def begin(self) -> None:
        """Its worker runs it now (the calls before it in that worker's window are answered)."""
        self.running = True
        if self.on_start is not None:
            self.on_start()


class _Worker:
    __slots__ = ("outstanding", "process", "reader", "ready", "sock", "unanswered_bytes")

    def __init__(self, process: subprocess.Popen[bytes], sock: socket.socket) -> None:
        self.process = process
        self.sock = sock
        self.reader = frames.FrameReader()
        self.ready = False
        #: Calls sent and not answered yet, in the order the worker runs them.
        self.outstanding: deque[ProcessCall] = deque()
        self.unanswered_bytes = 0


def fields_of(rec: Record) -> tuple[Any, ...]:
    """What a worker needs of a record, not its engine state (partition, lane, tracker);
    ``consumers.execution.process_worker.record_of`` rebuilds it."""
    return (
        rec.topic,
        rec.partition,
        rec.offset,
        rec.key,
        rec.value,
        rec.headers,
        rec.timestamp,
        rec.attempts,
    )


def payload_size(subject: Record | list[Record]) -> int:
    """Bytes of keys, values and headers (what dominates a pickled record)."""
    total = 0
    for rec in subject if isinstance(subject, list) else (subject,):
        total += len(rec.key or b"") + len(rec.value or b"")
        for name, value in rec.headers or ():
            total += len(name) + len(value or b"")
    return total


class ProcessExecutor:
    """``workers`` processes running one workload's handler; see the module docstring."""

    def __init__(self, handler: Handler, workers: int, name: str, max_bytes: int) -> None:
        problem = process_problem(handler)
        if problem is not None:
            raise ProcessExecutorError(f"workload {name!r}: {problem}")
        self._handler = handler
        self._name = name
        self._max_bytes = max_bytes
        self._loop = asyncio.get_running_loop()
        self._pending: deque[ProcessCall] = deque()
        self._ids = itertools.count()
        self._task_seconds = 0.0
        self._closed = False
        self.abandoned = 0  # a killed worker is gone at once: nothing is left running
        self._workers: list[_Worker] = []
        try:
            self._workers = [self._start() for _ in range(workers)]
            for worker in self._workers:  # at start, a handler that cannot load is an error now
                self._await_ready(worker)
        except (ProcessExecutorError, OSError) as exc:
            self.close()
            if isinstance(exc, ProcessExecutorError):
                raise
            raise ProcessExecutorError(f"workload {name!r}: cannot start workers: {exc}") from exc

    # ------------------------------------------------------------------ workers

    def _start(self) -> _Worker:
        ours, theirs = socket.socketpair()
        with theirs:
            process = subprocess.Popen(
                [sys.executable, "-m", "consumers.execution.process_worker", str(theirs.fileno())],
                pass_fds=[theirs.fileno()],
                stdin=subprocess.DEVNULL,
            )
        frames.send(ours, sys.path)
        frames.send(ours, self._handler)
        return _Worker(process, ours)

    def _await_ready(self, worker: _Worker) -> None:
        """Block until ``worker`` imported the handler (only at start)."""
        worker.sock.settimeout(START_TIMEOUT)
        try:
            reason = self._hello(worker)
        except TimeoutError:
            reason = f"it did not import the handler within {START_TIMEOUT:g}s"
        finally:
            worker.sock.settimeout(None)
        if reason:
            raise ProcessExecutorError(
                f"workload {self._name!r}: a handler worker process failed to start: {reason}"
            )

    def _hello(self, worker: _Worker) -> str:
        """Read a worker's first message; '' when it is ready (replies are read from now on),
        else why it is not."""
        try:
            hello = frames.receive(worker.sock)
        except (EOFError, ConnectionError):
            return f"it exited with code {worker.process.wait(5)} (its stderr has the details)"
        if hello[0] != "ready":
            return str(hello[1])
        worker.ready = True
        self._loop.add_reader(worker.sock.fileno(), self._readable, worker)
        return ""

    def _starting(self, worker: _Worker) -> None:
        """A replacement's first message arrived (it started without blocking the loop)."""
        self._loop.remove_reader(worker.sock.fileno())
        reason = self._hello(worker)
        if reason:
            log.error("workload %s: a new handler worker failed: %s", self._name, reason)
            self._replace(worker, delay=RESTART_DELAY)
        else:
            self._dispatch()

    def _stop(self, worker: _Worker) -> None:
        self._loop.remove_reader(worker.sock.fileno())
        worker.sock.close()
        worker.process.kill()
        worker.process.wait(5)

    def _replace(self, worker: _Worker, delay: float = 0.0) -> None:
        """Stop ``worker``; its unanswered calls go back to the front of the queue; start anew
        (after ``delay`` when the last start failed)."""
        self._stop(worker)
        for call in reversed(worker.outstanding):
            call.worker = None
            call.running = False
            if not call.future.done():
                self._pending.appendleft(call)
        worker.outstanding.clear()
        worker.unanswered_bytes = 0
        index = self._workers.index(worker)
        if delay:
            self._loop.call_later(delay, self._restart, index, worker)
        else:
            self._restart(index, worker)

    def _restart(self, index: int, old: _Worker) -> None:
        if self._closed or self._workers[index] is not old:
            return
        try:
            new = self._start()
        except OSError as exc:
            log.error("workload %s: cannot start a handler worker: %s", self._name, exc)
            self._loop.call_later(RESTART_DELAY, self._restart, index, old)
            return
        self._workers[index] = new
        self._loop.add_reader(new.sock.fileno(), self._starting, new)

    # ------------------------------------------------------------------ calls

    def submit(self, subject: Record | list[Record]) -> ProcessCall:
        future = self._loop.create_future()
        size = payload_size(subject)
        if size > self._max_bytes:
            future.set_exception(
                HandoffTooLarge(
                    f"{size:,} bytes of keys, values and headers is above the process "
                    f"hand-off limit of {self._max_bytes:,}"
                )
            )
            return ProcessCall(-1, None, size, future)
        if isinstance(subject, list):
            payload: Any = [fields_of(r) for r in subject]
        else:
            payload = fields_of(subject)
        call = ProcessCall(next(self._ids), payload, size, future)
        self._pending.append(call)
        self._dispatch()
        return call

    async def abandon(self, call: ProcessCall, grace: Callable[[], Awaitable[object]]) -> None:
        """A call timed out: kill its worker if that worker is running it now (at once: a
        process can be stopped, so no ``grace``)."""
        worker = call.worker
        if worker is None:  # still queued here: it will be skipped
            return
        if worker.outstanding and worker.outstanding[0] is call:
            log.warning(
                "workload %s: killing handler worker pid %s (timed out) and starting another",
                self._name,
                worker.process.pid,
            )
            self._replace(worker)

    def _window(self) -> int:
        seconds = self._task_seconds
        if seconds <= 0:
            return 1
        return max(1, min(MAX_WINDOW, int(WINDOW_SECONDS / seconds)))

    def _dispatch(self) -> None:
        pending = self._pending
        window = self._window()
        for worker in self._workers:
            if not pending:
                return
            if not worker.ready:
                continue
            batch = []
            while pending and len(worker.outstanding) < window:
                call = pending[0]
                if call.future.done():  # timed out while queued
                    pending.popleft()
                    continue
                if worker.outstanding and (
                    worker.unanswered_bytes + call.size > MAX_UNANSWERED_BYTES
                ):
                    break
                pending.popleft()
                call.worker = worker
                worker.outstanding.append(call)
                if len(worker.outstanding) == 1:
                    call.begin()
                worker.unanswered_bytes += call.size
                batch.append((call.task_id, call.payload))
            if batch:
                # A worker that is gone fails the send; its reader sees the end of the socket.
                with contextlib.suppress(OSError):
                    frames.send(worker.sock, batch)

    def collect(self) -> None:
        """Read now the replies that have reached the workers' sockets (``CallPool.collect``)."""
        for worker in list(self._workers):
            if worker.ready and worker.outstanding:
                self._readable(worker)

    def _readable(self, worker: _Worker) -> None:
        try:
            # Never blocks: collect() may have read what woke this reader.
            data = worker.sock.recv(1 << 18, socket.MSG_DONTWAIT)
        except BlockingIOError:
            return
        except OSError:
            data = b""
        if not data:
            self._died(worker)
            return
        outstanding = worker.outstanding
        for reply in worker.reader.feed(data):
            call = outstanding.popleft()  # replies come in the order the calls were sent
            worker.unanswered_bytes -= call.size
            if isinstance(reply, frames.UnreadableFrame):
                unreadable = f"the worker's reply cannot be unpickled here: {reply.reason}"
                if not call.future.done():
                    call.future.set_exception(ReplyUnreadable(unreadable))
            else:
                task_id, ok, value, seconds = reply
                if call.task_id != task_id:
                    raise RuntimeError(f"worker replied to task {task_id}, not {call.task_id}")
                self._task_seconds += 0.1 * (seconds - self._task_seconds)
                if not call.future.done():
                    if ok:
                        call.future.set_result(value)
                    else:
                        call.future.set_exception(value)
            if outstanding:
                outstanding[0].begin()
        self._dispatch()

    def _died(self, worker: _Worker) -> None:
        try:
            code: int | str = worker.process.wait(1)
        except subprocess.TimeoutExpired:
            code = "unknown: it closed its socket"
        log.error(
            "workload %s: handler worker pid %s exited (code %s); starting another",
            self._name,
            worker.process.pid,
            code,
        )
        if worker.outstanding:
            running = worker.outstanding.popleft()
            worker.unanswered_bytes -= running.size
            if not running.future.done():
                running.future.set_exception(
                    WorkerDied(f"the worker process exited with code {code} while running it")
                )
        self._replace(worker)

    def close(self) -> None:
        """Stop every worker (a drain already waited for the calls it could)."""
        self._closed = True
        for worker in self._workers:
            self._loop.remove_reader(worker.sock.fileno())
            with contextlib.suppress(OSError):
                frames.send(worker.sock, None)
        for worker in self._workers:
            try:
                worker.process.wait(1)
            except subprocess.TimeoutExpired:
                worker.process.kill()
                worker.process.wait(5)
            worker.sock.close()
        for call in self._pending:
            if not call.future.done():
                call.future.cancel()
        self._pending.clear()
