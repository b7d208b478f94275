"""Tiny handlers that spec tests import by path, e.g. ``tests.handlers:noop``."""

from __future__ import annotations

from collections.abc import Callable


async def noop(record: object) -> None:
    """An async handler that does nothing."""


def sync_noop(record: object) -> None:
    """A sync handler that does nothing."""


not_callable = 3


def _local_handler() -> Callable[[object], None]:
    def handle(record: object) -> None:
        return None

    return handle


#: A plain def that worker processes could not import by name (``executor: process`` refuses it).
local_handler = _local_handler()
