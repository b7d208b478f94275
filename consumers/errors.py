"""One error tree for Lanehouse: every public exception class of the packages is here, and the
two private control-flow ones (``_OverBudget`` in ``config/yaml_budget.py``, ``_ClientGone`` in
``service/http.py``) subclass ``LanehouseError`` too, so one ``except LanehouseError`` catches
every error raised on purpose (``tests/unit/test_errors.py`` holds both and the drawing below).

    LanehouseError
    ├── SpecError              a workload spec is invalid (file, field, reason)
    ├── HandlerImportError     a ``module:callable`` path does not resolve (SpecError names the file)
    ├── HandlerError           user handler code failed (wraps the original exception)
    │   └── HandlerTimeout     the handler ran past the workload's timeout
    ├── CallFailed             a record's call failed around the handler, not in it
    │   ├── HandoffTooLarge    a record too large to hand to a worker process
    │   ├── WorkerDied         the worker process running the record exited
    │   ├── RemoteError        a worker's handler exception that could not be pickled back
    │   └── ReplyUnreadable    a worker's reply that the consumer cannot unpickle
    ├── BrokerError            the broker or client failed in a way the engine cannot absorb
    │   ├── DeliveryError      a record was not written (``permanent``: sending again fails too)
    │   ├── TopicMissing       the broker says a topic does not exist
    │   ├── TopicReplaced      a topic was deleted or recreated under a running workload
    │   ├── FinalCommitFailed  a stop drained its records but could not commit their positions
    │   └── SinkWriteError     an output or dead letter cannot be written (refused, or past its bound)
    ├── DeadLetterRatioExceeded  the safety valve stopped a workload dead-lettering too much
    ├── LandingError           a landed file cannot be written and a retry would not help
    │   └── DamagedFile        a landed file cannot be read (it is moved aside, not deleted)
    ├── PermitStoreError       a shared permit store is unreachable or refuses a renewal
    ├── ProcessExecutorError   a handler cannot run in worker processes
    ├── RewindRefused          a rewind cannot be done as asked; nothing was changed
    ├── LagUnavailable         the broker did not tell a workload's lag in time
    └── EngineError            an engine invariant was broken (a bug, never a user error)

The errors about a place (broker, landing, engine, the safety valve) carry it as fields:
``workload``, ``topic``, ``partition``, ``offset`` (``None`` where it does not apply), and
``retriable``: whether running again can help (``True``), cannot (``False``), or is not known
(``None``). :meth:`LanehouseError.context` gives them as one line; the CLI prints it.

Retry and dead-letter logic acts on ``HandlerError`` only, so engine failures are never mistaken
for a bad record.
"""

from __future__ import annotations

from typing import Any, Literal, Protocol


class LanehouseError(Exception):
    """Root of every error Lanehouse raises on purpose."""

    workload: str | None = None
    topic: str | None = None
    partition: int | None = None
    offset: int | None = None
    retriable: bool | None = None

    def __reduce__(self) -> tuple[Any, ...]:
        """Pickled as its message and fields, whatever its constructor takes: errors cross to and
        from worker processes, and ``RemoteError(type_name, message)`` or ``SinkWriteError``
        rebuilt from ``args`` alone would fail to unpickle."""
        return (_rebuild, (type(self), self.args, self.__dict__))

    def context(self) -> str:
        """``workload orders · topic t[0]@12 · running again can help``: the fields that are set,
        for a line under the message (empty when none is)."""
        parts = []
        if self.workload is not None:
            parts.append(f"workload {self.workload}")
        if self.topic is not None:
            where = self.topic
            if self.partition is not None:
                where += f"[{self.partition}]"
            if self.offset is not None:
                where += f"@{self.offset}"
            parts.append(f"topic {where}")
        if self.retriable is not None:
            parts.append(
                "running again can help" if self.retriable else "running again will not help"
            )
        return " · ".join(parts)


class _Located(Protocol):
    topic: str
    partition: int
    offset: int


def at(workload: str, record: _Located) -> dict[str, Any]:
    """The :class:`PlaceError` fields of an error about ``record`` of ``workload``:
    ``raise LandingError(message, **at(name, record))``."""
    return {
        "workload": workload,
        "topic": record.topic,
        "partition": record.partition,
        "offset": record.offset,
    }


def describe(error: BaseException) -> str:
    """The error's message, then its context in brackets when it has one: for log lines."""
    where = error.context() if isinstance(error, LanehouseError) else ""
    return f"{error} [{where}]" if where else str(error)


def _rebuild(
    kind: type[LanehouseError], args: tuple[Any, ...], state: dict[str, Any]
) -> LanehouseError:
    error = kind.__new__(kind)
    error.args = args
    error.__dict__.update(state)
    return error


class PlaceError(LanehouseError):
    """An error about a place: a message, and the workload, topic, partition and offset it
    concerns as keyword fields (each optional), with whether running again can help."""

    #: The class's answer when a raise site does not give one.
    default_retriable: bool | None = None

    def __init__(
        self,
        message: str,
        *,
        workload: str | None = None,
        topic: str | None = None,
        partition: int | None = None,
        offset: int | None = None,
        retriable: bool | None = None,
    ) -> None:
        super().__init__(message)
        self.workload = workload
        self.topic = topic
        self.partition = partition
        self.offset = offset
        self.retriable = self.default_retriable if retriable is None else retriable


class SpecError(LanehouseError, ValueError):
    """A workload spec is invalid; the message names the file and the field."""

    def __init__(self, file: str, field: str, reason: str) -> None:
        self.file = file
        self.field = field
        self.reason = reason
        where = f"{file}: {field}" if field else file
        super().__init__(f"{where}: {reason}")


class HandlerError(LanehouseError):
    """A user handler raised; carries where the record came from."""

    def __init__(
        self,
        workload: str,
        topic: str,
        partition: int,
        offset: int,
        key: bytes | None,
        reason: str,
    ) -> None:
        self.workload = workload
        self.topic = topic
        self.partition = partition
        self.offset = offset
        self.key = key
        self.reason = reason
        super().__init__(
            f"workload {workload!r}: handler failed on {topic}[{partition}]@{offset} "
            f"key={key!r}: {reason}"
        )


class HandlerTimeout(HandlerError):
    """The handler ran past the workload's ``timeout`` and was cancelled."""


class BrokerError(PlaceError):
    """The broker or its client failed in a way the engine cannot absorb."""


class DeliveryError(BrokerError):
    """Why a record was not written, and whether sending it again can succeed.

    ``permanent``: the same record fails the same way however often it is sent (larger than the
    client's or the topic's limit, not authorized, an invalid topic).
    """

    def __init__(self, reason: str, *, permanent: bool) -> None:
        super().__init__(reason, retriable=not permanent)
        self.reason = reason
        self.permanent = permanent


class TopicMissing(BrokerError):
    """The broker says the topic does not exist (deleted, or never created)."""

    default_retriable = False


class TopicReplaced(BrokerError):
    """A topic a workload reads was deleted, or deleted and created again, while it ran: its
    positions belong to the old log, so they are never committed, and the workload must start
    again to read the topic as it is now."""

    default_retriable = True


class FinalCommitFailed(BrokerError):
    """A stop drained every record but the broker refused the final commit: the stop is not
    clean. Nothing is lost (the records past the last commit are handled again by the next
    run), but the run must not report "drained and committed"."""

    def __init__(self, workload: str, reason: str) -> None:
        self.reason = reason
        super().__init__(
            f"workload {workload}: the final commit failed ({reason}); records after the last "
            "commit are handled again by the next run (none lost)",
            workload=workload,
            retriable=True,
        )


class SinkWriteError(BrokerError):
    """A record's output or dead letter cannot be written: the client or broker refused it for
    good (too large, not authorized), or a dead letter still failed past its write timeout. The
    workload stops; the record, and everything after it in its partition, stays uncommitted."""

    def __init__(
        self,
        workload: str,
        kind: Literal["output", "dead letter"],
        sink: str,
        record: tuple[str, int, int],
        reason: str,
    ) -> None:
        self.kind = kind
        self.sink = sink
        self.reason = reason
        topic, partition, offset = record
        where = f"{topic}[{partition}]@{offset}"
        what = f"output write for {where}" if kind == "output" else f"dead-letter write of {where}"
        why = " so the output order is never broken" if kind == "output" else ""
        super().__init__(
            f"workload {workload}: {what} to {sink} failed ({reason}); stopping{why} (the record "
            "is not committed)",
            workload=workload,
            topic=topic,
            partition=partition,
            offset=offset,
        )


class DeadLetterRatioExceeded(PlaceError):
    """Too many recent records went to the dead-letter topic: likely a bad deploy, so stop."""

    default_retriable = False


class LandingError(PlaceError):
    """A landed file could not be written and retrying would not help; the workload stops."""

    default_retriable = False


class DamagedFile(LandingError):
    """A landed file cannot be read (truncated, overwritten): its footer or rows are gone."""

    def __init__(self, path: str, reason: str) -> None:
        self.path = path
        self.reason = reason
        super().__init__(f"landed file {path} cannot be read: {reason}")


class HandlerImportError(LanehouseError, ValueError):
    """A ``module:callable`` path could not be resolved to a callable."""


class EngineError(PlaceError):
    """An engine invariant was broken; always a bug worth reporting."""

    default_retriable = False


class CallFailed(LanehouseError):
    """A record's call failed around the handler (the hand-off, the worker process), not in
    the handler's own code; the engine resolves it as the handler's failure (retried, then
    dead-lettered under this class's name)."""


class HandoffTooLarge(CallFailed):
    """A record above the hand-off limit; failed without being sent."""


class WorkerDied(CallFailed):
    """The worker process running this record exited."""


class RemoteError(CallFailed):
    """A handler's exception that could not be pickled back: its type name and message."""

    def __init__(self, type_name: str, message: str) -> None:
        super().__init__(f"{type_name}: {message}")
        self.type_name = type_name


class ReplyUnreadable(CallFailed):
    """A worker's reply (the handler's result) that the consumer cannot unpickle, such as an
    exception inside it whose class needs more arguments than it pickles; only that record's
    call fails, the replies after it are read on."""


class PermitStoreError(LanehouseError):
    """The permit database could not be reached or refused a renewal."""


class ProcessExecutorError(LanehouseError):
    """The handler cannot run in worker processes (it cannot be pickled, or a worker failed to
    start)."""


class RewindRefused(LanehouseError):
    """The rewind cannot be done as asked; nothing was changed. The message says why."""


class LagUnavailable(LanehouseError):
    """The broker did not tell a workload's lag (in time); autoscaling holds the count."""

    def __init__(self, workload: str, reason: str) -> None:
        self.workload = workload
        self.reason = reason
        self.retriable = True
        super().__init__(f"workload {workload!r}: cannot measure lag: {reason}")
