"""One error tree for Lanehouse.

    LanehouseError
    ├── SpecError            a workload spec is invalid (file, field, reason)
    ├── HandlerImportError   a ``module:callable`` path does not resolve (SpecError names the file)
    ├── HandlerError         user handler code failed (wraps the original exception)
    │   └── HandlerTimeout   the handler ran past the workload's timeout
    ├── BrokerError          the broker or client reported an error the engine cannot absorb
    │   ├── TopicMissing     the broker says a topic does not exist
    │   ├── TopicReplaced    a topic was deleted or recreated under a running workload
    │   ├── FinalCommitFailed  a stop drained its records but could not commit their positions
    │   └── SinkWriteError   an output or dead letter cannot be written (refused, or past its bound)
    ├── DeadLetterRatioExceeded  the safety valve stopped a workload dead-lettering too much
    ├── LandingError         a landed file cannot be written and a retry would not help
    │   └── DamagedFile      a landed file cannot be read (it is moved aside, not deleted)
    ├── PermitStoreError     a shared permit store is unreachable or refuses (permit_store.py)
    ├── ProcessExecutorError a handler cannot run in worker processes (processes.py)
    └── EngineError          an engine invariant was broken (a bug, never a user error)

``PermitStoreError`` and ``ProcessExecutorError`` live with the mechanism that raises them; all
subclass ``LanehouseError``, so one ``except LanehouseError`` catches every error raised on purpose.

Retry and dead-letter logic acts on ``HandlerError`` only, so engine failures are never mistaken
for a bad record.
"""

from __future__ import annotations

from typing import Literal


class LanehouseError(Exception):
    """Root of every error Lanehouse raises on purpose."""


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


class BrokerError(LanehouseError):
    """The broker or its client failed in a way the engine cannot absorb."""


class TopicMissing(BrokerError):
    """The broker says the topic does not exist (deleted, or never created)."""


class TopicReplaced(BrokerError):
    """A topic a workload reads was deleted, or deleted and created again, while it ran: its
    positions belong to the old log, so they are never committed, and the workload must start
    again to read the topic as it is now."""


class FinalCommitFailed(BrokerError):
    """A stop drained every record but the broker refused the final commit: the stop is not
    clean. Nothing is lost (the records past the last commit are handled again by the next
    run), but the run must not report "drained and committed"."""

    def __init__(self, workload: str, reason: str) -> None:
        self.workload = workload
        self.reason = reason
        super().__init__(
            f"workload {workload}: the final commit failed ({reason}); records after the last "
            "commit are handled again by the next run (none lost)"
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
        self.workload = workload
        self.kind = kind
        self.sink = sink
        self.topic, self.partition, self.offset = record
        self.reason = reason
        where = f"{self.topic}[{self.partition}]@{self.offset}"
        what = f"output write for {where}" if kind == "output" else f"dead-letter write of {where}"
        why = " so the output order is never broken" if kind == "output" else ""
        super().__init__(
            f"workload {workload}: {what} to {sink} failed ({reason}); stopping{why} (the record "
            "is not committed)"
        )


class DeadLetterRatioExceeded(LanehouseError):
    """Too many recent records went to the dead-letter topic: likely a bad deploy, so stop."""


class LandingError(LanehouseError):
    """A landed file could not be written and retrying would not help; the workload stops."""


class DamagedFile(LandingError):
    """A landed file cannot be read (truncated, overwritten): its footer or rows are gone."""

    def __init__(self, path: str, reason: str) -> None:
        self.path = path
        self.reason = reason
        super().__init__(f"landed file {path} cannot be read: {reason}")


class HandlerImportError(LanehouseError, ValueError):
    """A ``module:callable`` path could not be resolved to a callable."""


class EngineError(LanehouseError):
    """An engine invariant was broken; always a bug worth reporting."""
