"""The test PostgreSQL server survives another test session starting on the machine."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from tests.postgres import start_postgres

pytestmark = pytest.mark.integration


@pytest.mark.skipif(os.geteuid() != 0, reason="only as root does the server run as another user")
def test_an_outage_works_after_another_session_locks_the_pytest_temp_root(
    tmp_path: Path,
) -> None:
    server = start_postgres(tmp_path / "pg")
    try:
        # What every new pytest session does to its temp root (``/tmp/pytest-of-<user>``).
        root = next(p for p in tmp_path.parents if p.name.startswith("pytest-of-"))
        mode = root.stat().st_mode & 0o777
        root.chmod(0o700)
        try:
            server.stop()  # pg_ctl runs as the server's user: it must still reach its data
            server.start()
            assert server.is_running()
        finally:
            root.chmod(mode)
    finally:
        server.cleanup()
    # The scratch directory outside pytest's temp dir is gone; its log is kept beside the test.
    assert server.home == tmp_path / "pg"
    assert not server.base_dir.exists()
    assert "database system is shut down" in (tmp_path / "pg" / "postgres.log").read_text()
