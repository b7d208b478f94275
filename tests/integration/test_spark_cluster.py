"""The Spark assets' session on a real standalone cluster, started as docker-compose.yml starts
it (pyspark's own ``spark-class`` Master and Worker): executors really write the lake, and the
cluster settings from LANEHOUSE_SPARK_MASTER/LANEHOUSE_SPARK_CONF are accepted. Everything
binds to 127.0.0.1. Slow: three JVMs start (master, worker, driver) plus an executor."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import textwrap
import time
import urllib.request
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pyspark
import pytest

from tests.postgres import free_port

pytestmark = [pytest.mark.slow, pytest.mark.timeout(300)]

ROOT = Path(__file__).resolve().parents[2]
SPARK_CLASS = Path(sys.executable).parent / "spark-class"


@dataclass(frozen=True)
class Cluster:
    master_url: str
    ui_port: int

    def status(self) -> dict[str, object]:
        with urllib.request.urlopen(f"http://127.0.0.1:{self.ui_port}/json/", timeout=5) as r:
            data: dict[str, object] = json.load(r)
            return data


def _spark_env() -> dict[str, str]:
    return {
        **os.environ,
        "SPARK_HOME": str(Path(pyspark.__file__).parent),
        "SPARK_LOCAL_IP": "127.0.0.1",
        "SPARK_NO_DAEMONIZE": "1",
    }


def _start(log: Path, *args: str) -> subprocess.Popen[bytes]:
    with log.open("wb") as out:
        return subprocess.Popen(
            [str(SPARK_CLASS), *args],
            env=_spark_env(),
            stdout=out,
            stderr=subprocess.STDOUT,
            start_new_session=True,  # its own process group: spark-class execs a JVM child
        )


def _stop(process: subprocess.Popen[bytes]) -> None:
    try:
        os.killpg(process.pid, signal.SIGTERM)
        process.wait(timeout=20)
    except subprocess.TimeoutExpired:
        os.killpg(process.pid, signal.SIGKILL)
        process.wait(timeout=10)
    except ProcessLookupError:
        pass


@pytest.fixture
def cluster(tmp_path: Path) -> Iterator[Cluster]:
    port, ui_port, worker_ui = free_port(), free_port(), free_port()
    master = _start(
        tmp_path / "master.log",
        "org.apache.spark.deploy.master.Master",
        *("--host", "127.0.0.1", "--port", str(port), "--webui-port", str(ui_port)),
    )
    worker = _start(
        tmp_path / "worker.log",
        "org.apache.spark.deploy.worker.Worker",
        f"spark://127.0.0.1:{port}",
        *("--host", "127.0.0.1", "--webui-port", str(worker_ui)),
        *("--work-dir", str(tmp_path / "work"), "--cores", "1", "--memory", "1g"),
    )
    result = Cluster(master_url=f"spark://127.0.0.1:{port}", ui_port=ui_port)
    try:
        deadline = time.monotonic() + 120
        while True:
            try:
                if result.status().get("aliveworkers") == 1:
                    break
            except (OSError, ValueError):
                # Refused, or the UI answered before its JSON page was mounted (an empty body).
                pass
            if time.monotonic() > deadline or master.poll() is not None:
                logs = {p.name: p.read_text()[-2000:] for p in tmp_path.glob("*.log")}
                pytest.fail(f"the cluster did not come up: {logs}")
            time.sleep(0.5)
        yield result
    finally:
        _stop(worker)
        _stop(master)


DRIVER = textwrap.dedent(
    """
    import json, sys
    from pyspark.sql import SparkSession
    from orchestration.lake.spark import spark_resource

    conf = spark_resource().effective_conf()
    builder = SparkSession.builder
    for key, value in conf.items():
        builder = builder.config(key, value)
    spark = builder.getOrCreate()
    spark.sparkContext.setLogLevel("ERROR")
    lake = sys.argv[1]
    spark.range(1000).selectExpr("id", "id % 7 AS k").write.mode("overwrite").parquet(lake)
    print(json.dumps({
        "rows": spark.read.parquet(lake).count(),
        "master": spark.sparkContext.master,
        "block_managers": spark.sparkContext._jsc.sc().getExecutorMemoryStatus().size(),
        "conf": conf,
    }))
    spark.stop()
    """
)


def test_the_lake_session_runs_its_work_on_cluster_executors(
    cluster: Cluster, tmp_path: Path
) -> None:
    lake = tmp_path / "lake" / "table"
    env = {
        **os.environ,
        "PYTHONPATH": str(ROOT),
        "LANEHOUSE_SPARK_MASTER": cluster.master_url,
        # Executors on this machine reach the driver on loopback; in compose the driver's
        # container address is found without this.
        "LANEHOUSE_SPARK_CONF": json.dumps(
            {
                "spark.driver.host": "127.0.0.1",
                "spark.driver.bindAddress": "127.0.0.1",
                "spark.executor.memory": "512m",
                "spark.cores.max": "1",
            }
        ),
    }
    env.pop("SPARK_LOCAL_IP", None)
    done = subprocess.run(
        [sys.executable, "-c", DRIVER, str(lake)],
        env=env,
        capture_output=True,
        text=True,
        timeout=240,
        check=False,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    report = json.loads(done.stdout.strip().splitlines()[-1])
    assert report["rows"] == 1000
    assert report["master"] == cluster.master_url
    assert report["block_managers"] >= 2  # the driver's and at least one executor's
    assert "spark.pyspark.python" not in report["conf"]  # this venv's path is not sent
    assert list(lake.glob("part-*.parquet")), "the executors wrote no file"
    completed = cluster.status()["completedapps"]
    assert isinstance(completed, list)
    assert [app["name"] for app in completed] == ["lanehouse-lake"]
