"""Shared fixtures: one Tansu broker per session, fresh topics per test, no silent thread deaths."""

from __future__ import annotations

import itertools
import os
import re
import signal
import sys
import threading
import uuid
import warnings
from collections.abc import Callable, Iterator
from pathlib import Path
from types import FrameType
from typing import TYPE_CHECKING

import pytest

from consumers.dev.embedded.pulsar import PulsarLiteBroker, start_pulsar_lite
from consumers.dev.embedded.tansu import TansuBroker, create_topic, start_tansu

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

    from tests.postgres import PostgresServer

_TIERS = ("unit", "integration", "reliability", "e2e")
#: The end-to-end files start whole platforms (``dagster dev``, brokers, Spark, a browser): three
#: at once on 2 cores starved each other past their waits (a CI run: a restart after ``kill -9``
#: not back in 180 s, a UI backfill not done in 480 s). So they run one after another, a chain.
_ONE_AT_A_TIME = "tests/e2e/"
#: End-to-end files that run beside that chain: the demo runs its pipeline in one process, as
#: heavy as a Spark integration file; the new project's ``dg dev`` has no browser, and one such
#: platform beside the chain's one fits (the chain was the suite's critical path: 975 s of
#: 1,006 on a clean clone, 2026-11-28).
_BESIDE_THE_CHAIN = ("tests/e2e/test_demo.py", "tests/e2e/test_new_project.py")
#: The files whose tests use the in-process Spark session (the ``spark`` fixture) run on one
#: worker, so one JVM serves them all: a JVM's start and its first jobs' compiling are most of a
#: small job's CPU. Measured alone on 2 cores, the three files in one process took 249 CPU-s
#: against 292 in three. Collection fails if a file uses ``spark`` and is not listed here.
_ONE_SPARK_SESSION = (
    "tests/integration/test_lake_assets.py",
    "tests/integration/test_rewind.py",
    "tests/integration/test_spark_jobs.py",
)


#: Java options of every Spark JVM the tests start, in this process or in a platform it runs
#: (``SPARK_SUBMIT_OPTS`` reaches each driver, ``SPARK_DAEMON_JAVA_OPTS`` a standalone master and
#: worker). The suite keeps both cores busy, so a JVM's CPU is its cost: tests run small jobs
#: in short-lived JVMs, where the C2 compiler's and the parallel collector's threads cost more
#: CPU than they win back. Measured alone on 2 cores: ``test_spark_jobs`` 158 → 112 CPU-s,
#: ``test_lake_assets`` 226 → 204, two asset runs in a fresh JVM 120 → 84. Semantics do not
#: change; production keeps the JVM's defaults. A developer's own value wins.
TEST_JVM_OPTIONS = "-XX:TieredStopAtLevel=1 -XX:+UseSerialGC"


def pytest_configure(config: pytest.Config) -> None:
    """Turn SIGTERM (``timeout``, CI limits) into KeyboardInterrupt so fixtures tear down and
    no broker is orphaned; by default SIGTERM ends Python without running finalizers. Set the
    test JVMs' options (``TEST_JVM_OPTIONS``) before any Spark starts."""
    if signal.getsignal(signal.SIGTERM) is signal.SIG_DFL:
        signal.signal(signal.SIGTERM, _interrupt)
    for variable in ("SPARK_SUBMIT_OPTS", "SPARK_DAEMON_JAVA_OPTS"):
        os.environ.setdefault(variable, TEST_JVM_OPTIONS)


def _interrupt(signum: int, frame: FrameType | None) -> None:
    raise KeyboardInterrupt(f"signal {signum}")


#: Slow clean-ups of session fixtures, run after the last test (outside any test's timeout).
_AT_SESSION_END: list[Callable[[], None]] = []


def pytest_sessionfinish(session: pytest.Session, exitstatus: int) -> None:
    while _AT_SESSION_END:
        _AT_SESSION_END.pop()()


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    """Tests under ``tests/<tier>/`` get the ``<tier>`` marker, so ``-m unit`` just works; a
    contract case on the in-memory backend (``backend`` or ``kafka_backend`` is ``memory``)
    starts no process, so it is ``unit`` wherever it lives (unless its module says otherwise:
    the process executor's cases start worker processes).

    Then the longest files run first (end-to-end, reliability, ``slow``, integration, unit), so
    parallel workers (``make test``) do not end on one long file while the others idle: mark a
    file ``slow`` once it takes a minute or so (``test_replica_runs``, 113 s, started last among
    the integration files and ended the suite 40 s after the other workers)."""
    for item in items:
        callspec = getattr(item, "callspec", None)
        chosen = {callspec.params.get(n) for n in ("backend", "kafka_backend")} if callspec else ()
        if "memory" in chosen and not item.get_closest_marker("integration"):
            item.add_marker(pytest.mark.unit)
            continue
        parts = Path(str(item.fspath)).parts
        for tier in _TIERS:
            if tier in parts and not item.get_closest_marker(tier):
                item.add_marker(getattr(pytest.mark, tier))
    files: dict[Path, int] = {}
    for item in items:
        files[item.path] = min(files.get(item.path, 4), _rank(item))
    _check_spark_files(items)
    items.sort(key=lambda item: files[item.path])  # stable: a file stays whole, in its order


def pytest_xdist_make_scheduler(config: pytest.Config, log: object) -> object | None:
    """``make test``'s schedule (``--dist loadfile``): a whole file per worker, except that
    ``tests/e2e/`` (but :data:`_BESIDE_THE_CHAIN`) is one unit, so its files run one after
    another on one worker, and the files of :data:`_ONE_SPARK_SESSION` are another. (xdist's
    own ``loadgroup`` cannot do it here: under pytest 9 its ``@group`` suffix no longer reaches
    the node ids.)"""
    if config.getvalue("dist") != "loadfile":
        return None
    from xdist.scheduler import LoadFileScheduling  # type: ignore[import-untyped]

    class FilesOrChains(LoadFileScheduling):  # type: ignore[misc]
        def _split_scope(self, nodeid: str) -> str:
            path = nodeid.split("::", 1)[0]
            if path.startswith(_ONE_AT_A_TIME) and path not in _BESIDE_THE_CHAIN:
                return _ONE_AT_A_TIME
            if path in _ONE_SPARK_SESSION:
                return "spark"
            return path

    return FilesOrChains(config, log)


def _check_spark_files(items: list[pytest.Item]) -> None:
    """Every file with a test that uses the ``spark`` fixture is in :data:`_ONE_SPARK_SESSION`
    (else its worker would start a JVM of its own)."""
    root = Path(__file__).resolve().parent.parent
    using = {
        item.path.resolve().relative_to(root).as_posix()
        for item in items
        if "spark" in getattr(item, "fixturenames", ())
    }
    if missing := sorted(using - set(_ONE_SPARK_SESSION)):
        raise pytest.UsageError(f"add {missing} to _ONE_SPARK_SESSION in tests/conftest.py")


def _rank(item: pytest.Item) -> int:
    for rank, tier in enumerate(("e2e", "reliability", "slow", "integration")):
        if item.get_closest_marker(tier):
            return rank
    return 4


@pytest.fixture(scope="session")
def kafka_broker(tmp_path_factory: pytest.TempPathFactory) -> Iterator[TansuBroker]:
    """A Tansu broker (memory storage) on a free loopback port, shared by the whole session.

    Its log stays in pytest's temp dir (``--basetemp`` to choose it) for post-mortems.
    """
    broker = start_tansu(log_dir=tmp_path_factory.mktemp("tansu"))
    try:
        yield broker
    finally:
        broker.stop()


TopicFactory = Callable[..., str]


@pytest.fixture
def topic_factory(kafka_broker: TansuBroker, request: pytest.FixtureRequest) -> TopicFactory:
    """``make_topic(partitions=4) -> name``: creates a fresh, uniquely named topic."""
    slug = re.sub(r"[^a-zA-Z0-9._-]+", "-", request.node.name)[:120].strip("-.") or "test"
    counter = itertools.count()

    def make_topic(partitions: int = 4) -> str:
        name = f"{slug}-{next(counter)}-{uuid.uuid4().hex[:8]}"
        create_topic(kafka_broker.bootstrap, name, partitions)
        return name

    return make_topic


@pytest.fixture(autouse=True)
def _platform_settings_from_env() -> Iterator[None]:
    """A test that built a platform with explicit places leaves none behind: the next test's
    sensors and jobs read the places from its own environment."""
    from orchestration import settings

    yield
    settings.reset()


@pytest.fixture(autouse=True)
def _no_disposed_dagster_instance_is_current(request: pytest.FixtureRequest) -> None:
    """Dagster keeps the storage of the instance a ``with DagsterInstance`` entered in a context
    variable (read when definitions load) and, on exit, puts back whatever was there when it
    entered. Instances entered and left out of order in one process (a module fixture's around a
    context object that enters an ephemeral one and leaves it when garbage-collected) can put
    back a disposed instance's storage; the next in-process ``Definitions`` load then fails with
    "Attempted to resolve undefined DagsterInstance weakref" (seen once, in a later file on the
    same worker, 2026-11-28). So no test starts with one: it is cleared, with a warning."""
    base = sys.modules.get("dagster._core.storage.defs_state.base")
    storage = base._current_storage.get() if base is not None else None
    ref = getattr(storage, "_instance_weakref", None)
    if base is not None and ref is not None and ref() is None:
        base._current_storage.set(None)
        warnings.warn(
            f"a disposed Dagster instance was current when {request.node.nodeid} started: cleared",
            stacklevel=1,
        )


@pytest.fixture(autouse=True)
def _fail_on_thread_exception() -> Iterator[None]:
    """Fail the test if any thread died with an uncaught exception while it ran."""
    deaths: list[str] = []
    previous = threading.excepthook

    def hook(args: threading.ExceptHookArgs) -> None:
        name = args.thread.name if args.thread is not None else "<unknown>"
        deaths.append(f"thread {name!r} died: {args.exc_type.__name__}: {args.exc_value}")
        previous(args)

    threading.excepthook = hook
    try:
        yield
    finally:
        threading.excepthook = previous
    if deaths:
        pytest.fail("background thread failed during the test:\n" + "\n".join(deaths))


@pytest.fixture(scope="session")
def pulsar_broker(tmp_path_factory: pytest.TempPathFactory) -> Iterator[PulsarLiteBroker]:
    """A pulsar-lite broker on a free loopback port, shared by the whole session.

    Its data dir (db, config, log) stays in pytest's temp dir for post-mortems.
    """
    broker = start_pulsar_lite(data_dir=tmp_path_factory.mktemp("pulsar-lite"))
    try:
        yield broker
    finally:
        broker.stop()


@pytest.fixture(scope="session")
def postgres_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[PostgresServer]:
    """A real PostgreSQL 18 on a free loopback port, shared by the whole session (~0.6 s).

    ``.uri``/``.sqlalchemy_url`` (user ``postgres``, no password), ``.create_database()`` for a
    fresh database per test, ``.stop()``/``.start()`` for outages. Its log stays in pytest's
    temp dir for post-mortems (its data too, unless run as root: see ``start_postgres``).
    """
    from tests.postgres import start_postgres

    server = start_postgres(tmp_path_factory.mktemp("postgres"))
    try:
        yield server
    finally:
        # A session fixture's teardown runs inside the last test's, under its timeout (2 s for
        # some unit tests): removing the data waits for pytest_sessionfinish.
        server.cleanup(remove=False)
        _AT_SESSION_END.append(server.remove_scratch)


@pytest.fixture(scope="session")
def spark() -> Iterator[SparkSession]:
    """One local SparkSession for the whole test session, started by the first test that needs
    it (the JVM takes ~10 s). Dagster's Spark resource in in-process runs reuses it."""
    from tests.spark import spark_for_tests

    with spark_for_tests("lanehouse-tests") as session:
        yield session


@pytest.fixture(params=["sqlite", "postgresql"])
def permit_db(
    request: pytest.FixtureRequest, tmp_path: Path
) -> tuple[str, str, PostgresServer | None]:
    """``(backend, url, server)``: a fresh permit database on SQLite or PostgreSQL."""
    if request.param == "sqlite":
        return "sqlite", f"sqlite:///{tmp_path / 'state' / 'permits.db'}", None
    server = request.getfixturevalue("postgres_server")
    return "postgresql", server.create_database(), server
