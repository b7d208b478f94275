"""Taking the permit database away from processes that lease through it: a real PostgreSQL
server stopped, or a SQLite file another process holds the write lock on (the ``permit_db``
fixture in ``tests/conftest.py`` gives the database)."""

from __future__ import annotations

import sqlite3
from collections.abc import Iterator
from contextlib import contextmanager

from tests.postgres import PostgresServer

PermitDb = tuple[str, str, "PostgresServer | None"]


@contextmanager
def outage(backend: str, url: str, server: PostgresServer | None) -> Iterator[None]:
    """The permit database is unavailable inside the block."""
    if server is not None:
        server.stop()
        try:
            yield
        finally:
            server.start()
        return
    # SQLite: another process holds the write lock, so no renewal can commit.
    lock = sqlite3.connect(url.removeprefix("sqlite:///"), isolation_level=None, timeout=10)
    lock.execute("BEGIN EXCLUSIVE")
    try:
        yield
    finally:
        lock.execute("ROLLBACK")
        lock.close()
