"""Lanehouse in a new Dagster project, as a new user meets it: the wheel, ``create-dagster``,
the component declared in ``defs.yaml``, one workload spec and handler of the user's own, one
asset of the user's own downstream of its landed dataset. Then ``dg check defs`` passes, the
discovery sensor's tick (under ``dg dev``) places the workload on a host run (the default for a
workload that needs no process of its own), records produced to the embedded Kafka land, and
the user's asset materializes from them."""

from __future__ import annotations

import json
import signal
import subprocess
from datetime import UTC, datetime
from pathlib import Path

import dagster
import pyarrow.parquet as pq
import pytest
import yaml
from confluent_kafka import Producer

from consumers.dev.embedded.tansu import TansuBroker
from tests.conftest import TopicFactory
from tests.helpers import free_port, wait_until
from tests.support.new_project import PROJECT, NewProject, build_wheel, create
from tests.support.processes import stop_group

pytestmark = [pytest.mark.e2e, pytest.mark.slow, pytest.mark.timeout(900)]

RECORDS = 240
KEYS = 12

HANDLER = '''"""The team's own handler: lands each audit event without its secret."""

import json

from consumers import Land, Record


def redact(record: Record) -> Land:
    event = record.json()
    event.pop("secret", None)
    return Land(json.dumps(event, sort_keys=True).encode())
'''

ASSET = '''"""The team's own asset, downstream of the landed dataset its workload lands."""

import dagster as dg
from pyspark.sql import functions as F

from orchestration.platform import (
    LAKE_PARTITIONS,
    SPARK_POOL,
    LakeSparkResource,
    landed_key,
    read_landed_days,
    run_days,
)


@dg.asset(deps=[landed_key("audit_log")], partitions_def=LAKE_PARTITIONS, pool=SPARK_POOL)
def audit_summary(context: dg.AssetExecutionContext, pyspark: LakeSparkResource) -> dg.MaterializeResult:
    landed = read_landed_days(pyspark.session(), "audit_log", run_days(context)).frame
    value = F.col("value").cast("string")
    return dg.MaterializeResult(
        metadata={
            "rows": landed.count(),
            "keys": landed.select("_key").distinct().count(),
            "with_secret": landed.filter(value.contains("secret")).count(),
        }
    )
'''

#: In a module of its own: a module with a ``@dg.definitions`` function contributes only that.
RESOURCES = """import dagster as dg

from orchestration.platform import spark_resource


@dg.definitions
def resources() -> dg.Definitions:
    return dg.Definitions(resources={"pyspark": spark_resource()})
"""


def write_user_files(project: NewProject, topic: str, bootstrap: str, url: str) -> None:
    package = project.root / "src" / PROJECT
    (package / "handlers.py").write_text(HANDLER)
    (package / "defs" / "audit_summary.py").write_text(ASSET)
    (package / "defs" / "resources.py").write_text(RESOURCES)
    (package / "defs" / "lanehouse").mkdir()
    (package / "defs" / "lanehouse" / "defs.yaml").write_text(
        yaml.safe_dump(
            {
                "type": "orchestration.platform.LanehouseComponent",
                "attributes": {"workloads": "workloads", "lake": "lake", "dagster_url": url},
            },
            sort_keys=False,
        )
    )
    (project.root / "workloads").mkdir()
    spec = {
        "name": "audit",
        "source": {
            "kind": "kafka",
            "bootstrap_servers": bootstrap,
            "topics": [topic],
            "config": {"session.timeout.ms": 6000, "heartbeat.interval.ms": 1500},
        },
        "handler": f"{PROJECT}.handlers:redact",
        "landing": {"dataset": "audit_log", "flush_interval": "1s"},
    }
    (project.root / "workloads" / "audit.yaml").write_text(yaml.safe_dump(spec, sort_keys=False))


def produce(bootstrap: str, topic: str, at: datetime) -> None:
    producer = Producer({"bootstrap.servers": bootstrap, "linger.ms": 5})
    stamp = int(at.timestamp() * 1000)
    for i in range(RECORDS):
        event = {"user": f"u{i % KEYS}", "action": "login", "secret": f"pw{i}"}
        producer.produce(
            topic, json.dumps(event).encode(), f"u{i % KEYS}".encode(), timestamp=stamp
        )
    assert producer.flush(30) == 0


def landed_rows(lake: Path) -> int:
    files = [p for p in (lake / "landed" / "audit_log").rglob("*.parquet") if ".tmp" not in p.parts]
    return sum(pq.read_metadata(p).num_rows for p in files)


def landed_reported(home: Path, day: str) -> int | None:
    """The row count of the host run's latest report of ``day`` of ``landed_audit_log``."""
    with dagster.DagsterInstance.from_config(str(home)) as instance:
        event = instance.get_latest_materialization_event(dagster.AssetKey("landed_audit_log"))
    if event is None or event.asset_materialization is None:
        return None
    materialization = event.asset_materialization
    rows = materialization.metadata.get("dagster/row_count")
    return rows.value if materialization.partition == day and rows is not None else None  # type: ignore[return-value]


def runs_of(home: Path, job: str) -> list[dagster.DagsterRun]:
    with dagster.DagsterInstance.from_config(str(home)) as instance:
        return list(instance.get_runs(dagster.RunsFilter(job_name=job)))


def test_a_new_project_runs_a_workload_and_its_own_asset_from_the_wheel(
    tmp_path: Path, kafka_broker: TansuBroker, topic_factory: TopicFactory
) -> None:
    bootstrap = kafka_broker.bootstrap
    topic = topic_factory(partitions=2)
    port = free_port()
    url = f"http://127.0.0.1:{port}"

    project = create(tmp_path, build_wheel(tmp_path), dagster.__version__)
    located = project.run(
        project.python, "-c", "import orchestration; print(orchestration.__file__)"
    )
    assert located.stdout.startswith(str(project.venv)), "the wheel's copy, not the tree's"
    write_user_files(project, topic, bootstrap, url)

    listed = project.run("dg", "list", "components", "--json")
    assert "orchestration.platform.LanehouseComponent" in listed.stdout
    project.run("dg", "check", "defs")
    defs = json.loads(project.run("dg", "list", "defs", "--json").stdout)
    keys = {asset["asset_key"] for asset in defs["assets"]}
    assert {"workloads/audit", "landed_audit_log", "audit_summary"} <= keys, keys

    now = datetime.now(UTC)
    produce(bootstrap, topic, now)
    dev = subprocess.Popen(
        ["dg", "dev", "--host", "127.0.0.1", "--port", str(port)],
        cwd=project.root,
        env=project.env(
            LANEHOUSE_SENSOR_SECONDS="2",
            LANEHOUSE_OBSERVE_SECONDS="2",
            LANEHOUSE_HOME=str(tmp_path / "state"),
        ),
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
        start_new_session=True,
        preexec_fn=_default_signals,
    )
    try:
        wait_until(
            lambda: any(r.status.value == "STARTED" for r in runs_of(project.home, "consume_host")),
            timeout=180,
            interval=1,
            message="the discovery sensor launched a host run for audit and it started",
        )
        (run,) = runs_of(project.home, "consume_host")
        assert run.tags["dagster/partition"] == "host.0"
        assert runs_of(project.home, "consume_workload") == [], "a hosted workload has no run"
        wait_until(
            lambda: landed_rows(project.root / "lake") == RECORDS,
            timeout=120,
            interval=0.5,
            message=f"all {RECORDS} records landed under lake/landed/audit_log",
        )
        day = now.date().isoformat()
        wait_until(
            lambda: landed_reported(project.home, day) == RECORDS,
            timeout=60,
            interval=0.5,
            message=f"the host run reported landed_audit_log {day} with {RECORDS} rows",
        )
        project.run(
            project.python, "-m", "dagster", "asset", "materialize",
            "-m", f"{PROJECT}.definitions", "--select", "audit_summary", "--partition", day,
        )  # fmt: skip
        with dagster.DagsterInstance.from_config(str(project.home)) as instance:
            event = instance.get_latest_materialization_event(dagster.AssetKey("audit_summary"))
            assert event is not None and event.asset_materialization is not None
            metadata = {k: v.value for k, v in event.asset_materialization.metadata.items()}
        assert metadata == {"rows": RECORDS, "keys": KEYS, "with_secret": 0}
    finally:
        stop_group(dev, timeout=60)


def _default_signals() -> None:
    """``dg dev`` stops on SIGINT; a background child would otherwise inherit it ignored."""
    signal.signal(signal.SIGINT, signal.SIG_DFL)
    signal.signal(signal.SIGTERM, signal.SIG_DFL)
