"""Permit pools declared by processes starting at once, on a real PostgreSQL.

Before: a clean-clone run failed ``test_three_processes_share_one_pool_fairly_and_safely`` with
``duplicate key value violates unique constraint "lanehouse_permit_pools_pkey"``. Each starter
read the pool's row ``FOR UPDATE``, found none (a lock cannot guard a row not there yet) and
inserted it; the second insert failed once the first committed.
"""

from __future__ import annotations

import threading
from typing import Any

import pytest
import sqlalchemy as sa

from consumers.permits.store import PermitStore
from tests.postgres import PostgresServer

pytestmark = pytest.mark.integration


def test_two_starters_declaring_one_new_pool_both_succeed(postgres_server: PostgresServer) -> None:
    url = postgres_server.create_database()
    first, second = PermitStore(url), PermitStore(url)
    first.ensure_schema()
    second.ensure_schema()
    wrote = threading.Event()  # the first starter has written the pool's row, not committed
    looked = threading.Event()  # the second starter has read the pool's row

    @sa.event.listens_for(first.engine, "after_cursor_execute")
    def hold_the_insert(conn: Any, cursor: Any, statement: str, *args: Any) -> None:
        if statement.lstrip().upper().startswith("INSERT INTO LANEHOUSE_PERMIT_POOLS"):
            wrote.set()
            # Commit only once the second starter has looked. When its own insert waits on
            # this uncommitted row it never looks: go on after a bound instead, below the
            # server's 1 s limit on a transaction left idle.
            looked.wait(timeout=0.5)

    @sa.event.listens_for(second.engine, "after_cursor_execute")
    def note_the_read(conn: Any, cursor: Any, statement: str, *args: Any) -> None:
        if "FROM lanehouse_permit_pools" in statement and "FOR UPDATE" in statement:
            looked.set()

    errors: list[BaseException] = []

    def declare(store: PermitStore, size: int) -> None:
        try:
            store.declare_pools({"api": size})
        except BaseException as exc:
            errors.append(exc)

    starter = threading.Thread(target=declare, args=(first, 10))
    starter.start()
    assert wrote.wait(timeout=30), "the first starter never wrote the pool"
    declare(second, 10)
    starter.join(timeout=30)
    assert errors == []
    assert [(pool.pool, pool.size) for pool in first.status()] == [("api", 10)]
