"""Tiny handlers that spec tests import by path, e.g. ``tests.handlers:noop``."""

from __future__ import annotations


async def noop(record: object) -> None:
    """An async handler that does nothing."""


def sync_noop(record: object) -> None:
    """A sync handler that does nothing."""


not_callable = 3
