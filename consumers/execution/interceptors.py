"""Interceptors: hooks around every handler call, configured by import path.

An interceptor is any object with ``before(record)`` and ``after(record, outcome, error)``
(either may be omitted: :func:`load_interceptor` fills in a no-op). ``before`` runs in the same
task as an ``async def`` handler, so a ``contextvars.ContextVar`` it sets (a correlation id lifted
from headers, say) is visible inside the handler. Interceptors run in order before the call and
in reverse order after it. One that raises turns the call into a failed attempt.

In a spec: ``interceptors: [my_pkg.tracing:CorrelationId]`` — a class is instantiated with no
arguments; any other callable object with the hooks is used as it is. In batch and unique modes
``before`` runs for each record of the batch before the one handler call and ``after`` for each,
in reverse, after it.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, Protocol

if TYPE_CHECKING:
    from consumers.errors import HandlerError
    from consumers.record import Record


class Interceptor(Protocol):
    def before(self, record: Record) -> None: ...
    def after(self, record: Record, outcome: Any, error: HandlerError | None) -> None: ...


class _Hooks:
    """Adapts an object that defines only some of the hooks."""

    def __init__(self, target: Any) -> None:
        self._before = getattr(target, "before", None)
        self._after = getattr(target, "after", None)
        if self._before is None and self._after is None:
            raise TypeError(f"{target!r} has neither before() nor after()")

    def before(self, record: Record) -> None:
        if self._before is not None:
            self._before(record)

    def after(self, record: Record, outcome: Any, error: HandlerError | None) -> None:
        if self._after is not None:
            self._after(record, outcome, error)


def load_interceptor(target: Any) -> Interceptor:
    """A class is instantiated; any object with ``before``/``after`` is used as it is."""
    return _Hooks(target() if isinstance(target, type) else target)
