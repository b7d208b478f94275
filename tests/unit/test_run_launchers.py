"""What deploy/'s run launchers would ask Docker and Kubernetes for when a consumer run starts
and stops, built by the launchers' own code (dagster-docker, dagster-k8s) from the files as
shipped. Neither Docker nor a cluster runs on the build machines: the Docker API client is real
up to the HTTP request (its body is captured), and the Kubernetes Job is captured where the
launcher would send it. What the daemon and the server then do is not tested here.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import docker  # type: ignore[import-untyped]  # no stubs installed
import pytest
import yaml
from dagster import DagsterInstance, DagsterRunStatus, instance_for_test
from dagster._config import process_config
from dagster._core.code_pointer import ModuleCodePointer
from dagster._core.launcher.base import LaunchRunContext
from dagster._core.origin import JobPythonOrigin, RepositoryPythonOrigin
from dagster._core.storage.dagster_run import DagsterRun
from dagster._core.utils import make_new_run_id
from dagster_docker import DockerRunLauncher
from dagster_k8s import K8sRunLauncher

pytestmark = pytest.mark.unit

ROOT = Path(__file__).resolve().parents[2]
COMPOSE: dict[str, Any] = yaml.safe_load((ROOT / "docker-compose.yml").read_text())
CONSUMER_JOB = "consume_workload"
IMAGE = "registry.example.com/lanehouse:0.1.0"


def launcher_config(path: Path, launcher: type[Any]) -> dict[str, Any]:
    """The file's run_launcher config as the instance hands it to the launcher's constructor."""
    raw = yaml.safe_load(path.read_text())["run_launcher"]["config"]
    result = process_config(launcher.config_type(), raw)
    assert result.success and result.value is not None, result.errors
    return dict(result.value)


@pytest.fixture
def instance() -> Iterator[DagsterInstance]:
    with instance_for_test() as test_instance:
        yield test_instance


def add_consumer_run(
    instance: DagsterInstance, tags: dict[str, str] | None = None, job_name: str = CONSUMER_JOB
) -> DagsterRun:
    """A consumer run as the discovery sensor's RunRequest makes it, loaded from the code server."""
    origin = JobPythonOrigin(
        job_name,
        RepositoryPythonOrigin(
            executable_path="/usr/local/bin/python",
            code_pointer=ModuleCodePointer("orchestration.definitions", "defs", "/opt/lanehouse"),
            container_image=IMAGE,
            entry_point=None,
            container_context=None,
        ),
    )
    run = DagsterRun(
        job_name=job_name,
        run_id=make_new_run_id(),
        tags=tags or {},
        job_code_origin=origin,
    )
    return instance.add_run(run)


# --------------------------------------------------------------------------- Docker (compose)


class CapturingDockerAPI(docker.APIClient):  # type: ignore[misc]  # Any: docker has no stubs
    """docker-py's real client, stopped where it would send a request."""

    def __init__(self) -> None:
        super().__init__(base_url="unix:///nonexistent/docker.sock", version="1.45")
        self.created: list[dict[str, Any]] = []
        self.calls: list[tuple[str, dict[str, Any]]] = []

    def create_container_from_config(
        self, config: dict[str, Any], name: str | None = None, platform: str | None = None
    ) -> dict[str, str]:
        self.created.append(config)
        return {"Id": "c0ffee"}

    def inspect_container(self, container: str) -> dict[str, Any]:
        return {"Id": container, "State": {"Status": "running"}}

    def start(self, container: str, *args: Any, **kwargs: Any) -> None:
        self.calls.append(("start", {"container": container}))

    def stop(self, container: str, timeout: int | None = None) -> None:
        self.calls.append(("stop", {"container": container, "timeout": timeout}))


@pytest.fixture
def docker_launch(
    instance: DagsterInstance, monkeypatch: pytest.MonkeyPatch
) -> tuple[DockerRunLauncher, CapturingDockerAPI, DagsterRun]:
    """deploy/dagster.yaml's launcher in a daemon with compose's environment, one run launched."""
    for name in COMPOSE["x-lanehouse-env"]:
        monkeypatch.setenv(name, f"<{name}>")
    config = launcher_config(ROOT / "deploy" / "dagster.yaml", DockerRunLauncher)
    launcher = DockerRunLauncher.from_config_value(None, config)  # type: ignore[arg-type]
    launcher.register_instance(instance)
    api = CapturingDockerAPI()
    client = docker.DockerClient.__new__(docker.DockerClient)
    client.api = api
    monkeypatch.setattr(launcher, "_get_client", lambda context: client)
    run = add_consumer_run(instance)
    launcher.launch_run(LaunchRunContext(dagster_run=run, workspace=None))
    return launcher, api, run


def test_a_consumer_run_gets_a_container_on_the_compose_network_with_its_mounts(
    docker_launch: tuple[DockerRunLauncher, CapturingDockerAPI, DagsterRun],
) -> None:
    _, api, run = docker_launch
    (body,) = api.created  # the body of POST /containers/create
    config = yaml.safe_load((ROOT / "deploy" / "dagster.yaml").read_text())["run_launcher"]
    # The code location's image wins over the launcher's (Dagster's rule); compose sets none.
    assert body["Image"] == IMAGE
    # The code server's interpreter: the same path in the same image.
    assert body["Cmd"][:5] == ["/usr/local/bin/python", "-m", "dagster", "api", "execute_run"]
    env = dict(item.split("=", 1) for item in body["Env"])
    assert env == {
        **{name: f"<{name}>" for name in config["config"]["env_vars"]},
        "DAGSTER_RUN_JOB_NAME": CONSUMER_JOB,
    }
    host = body["HostConfig"]
    assert host["NetworkMode"] == COMPOSE["networks"]["default"]["name"]
    assert host["VolumesFrom"] == [COMPOSE["services"]["dagster-code"]["container_name"]]
    assert host["Init"] is True
    assert "Binds" not in host and "Privileged" not in host  # no Docker socket for runs
    assert body["Labels"] == {"dagster/run_id": run.run_id, "dagster/job_name": CONSUMER_JOB}
    assert api.calls == [("start", {"container": "c0ffee"})]


def test_the_launcher_image_is_used_when_the_code_location_names_none(
    instance: DagsterInstance, monkeypatch: pytest.MonkeyPatch
) -> None:
    config = launcher_config(ROOT / "deploy" / "dagster.yaml", DockerRunLauncher)
    launcher = DockerRunLauncher.from_config_value(None, config)  # type: ignore[arg-type]
    run = add_consumer_run(instance)
    assert run.job_code_origin is not None
    origin = run.job_code_origin._replace(
        repository_origin=run.job_code_origin.repository_origin._replace(container_image=None)
    )
    assert launcher._get_docker_image(origin) == COMPOSE["services"]["dagster-code"]["image"]


def test_terminating_a_consumer_run_stops_its_container_with_time_to_drain(
    docker_launch: tuple[DockerRunLauncher, CapturingDockerAPI, DagsterRun],
    instance: DagsterInstance,
) -> None:
    """`docker stop -t 45`: SIGTERM (the run drains and commits), SIGKILL only after 45 s."""
    launcher, api, run = docker_launch
    assert launcher.terminate(run.run_id) is True
    assert api.calls[-1] == ("stop", {"container": "c0ffee", "timeout": 45})
    stored = instance.get_run_by_id(run.run_id)
    assert stored is not None and stored.status == DagsterRunStatus.CANCELING


# --------------------------------------------------------------------------- Kubernetes


@pytest.fixture
def k8s_launcher(instance: DagsterInstance, tmp_path: Path) -> K8sRunLauncher:
    """deploy/kubernetes/dagster-instance.yaml's launcher; credentials from a kubeconfig that
    points nowhere instead of the pod's service account (nothing is sent)."""
    kubeconfig = tmp_path / "kubeconfig"
    kubeconfig.write_text(
        yaml.safe_dump(
            {
                "apiVersion": "v1",
                "kind": "Config",
                "clusters": [{"name": "c", "cluster": {"server": "https://127.0.0.1:9"}}],
                "users": [{"name": "u", "user": {"token": "t"}}],
                "contexts": [{"name": "x", "context": {"cluster": "c", "user": "u"}}],
                "current-context": "x",
            }
        )
    )
    config = launcher_config(
        ROOT / "deploy" / "kubernetes" / "dagster-instance.yaml", K8sRunLauncher
    )
    config.update(load_incluster_config=False, kubeconfig_file=str(kubeconfig))
    launcher = K8sRunLauncher.from_config_value(None, config)
    assert isinstance(launcher, K8sRunLauncher)
    launcher.register_instance(instance)
    return launcher


def launched_job(
    launcher: K8sRunLauncher,
    instance: DagsterInstance,
    monkeypatch: pytest.MonkeyPatch,
    tags: dict[str, str] | None = None,
    job_name: str = CONSUMER_JOB,
) -> Any:
    """The Kubernetes Job (kubernetes.client.V1Job) the launcher creates for a consumer run."""
    created: list[Any] = []
    monkeypatch.setattr(
        launcher._api_client,
        "create_namespaced_job_with_retries",
        lambda body, namespace: created.append((body, namespace)),
    )
    run = add_consumer_run(instance, tags, job_name)
    launcher.launch_run(LaunchRunContext(dagster_run=run, workspace=None))
    ((job, namespace),) = created
    assert namespace == "lanehouse"
    return job


def selects(selector: Any, labels: dict[str, str]) -> bool:
    """A Kubernetes label selector (``matchLabels``, ``matchExpressions`` with ``In``) on labels."""
    expressions = selector.match_expressions or []
    assert {e.operator for e in expressions} <= {"In"}
    return (selector.match_labels or {}).items() <= labels.items() and all(
        labels.get(e.key) in e.values for e in expressions
    )


def test_a_consumer_run_is_a_job_that_drains_spreads_and_reads_the_platform_config(
    k8s_launcher: K8sRunLauncher, instance: DagsterInstance, monkeypatch: pytest.MonkeyPatch
) -> None:
    job = launched_job(k8s_launcher, instance, monkeypatch)
    pod = job.spec.template.spec
    assert pod.termination_grace_period_seconds == 45
    (spread,) = pod.topology_spread_constraints
    assert spread.topology_key == "kubernetes.io/hostname"
    assert spread.when_unsatisfiable == "ScheduleAnyway"
    # The constraint selects the pods of runs of one workload and of host runs (their label is
    # really on them), and not a Spark run's.
    labels = job.spec.template.metadata.labels
    assert selects(spread.label_selector, labels)
    host = launched_job(k8s_launcher, instance, monkeypatch, job_name="consume_host")
    assert selects(spread.label_selector, host.spec.template.metadata.labels)
    assert not selects(spread.label_selector, {**labels, "dagster/job": "spark_daily"})
    assert {volume.name for volume in pod.volumes} == {"workloads", "platform-config", "lake"}
    assert pod.volumes[2].persistent_volume_claim.claim_name == "lanehouse-lake"

    (container,) = pod.containers
    assert container.image == IMAGE
    assert container.args[:5] == ["/usr/local/bin/python", "-m", "dagster", "api", "execute_run"]
    sources = {(s.config_map_ref or s.secret_ref).name for s in container.env_from}
    assert sources == {"lanehouse-env", "lanehouse-secrets"}
    env = {var.name: var for var in container.env}
    assert env["DAGSTER_HOME"].value == "/opt/dagster/home"
    password = env["DAGSTER_PG_PASSWORD"].value_from.secret_key_ref
    assert (password.name, password.key) == ("lanehouse-postgresql", "postgresql-password")
    mounts = {mount.mount_path: mount for mount in container.volume_mounts}
    assert set(mounts) == {
        "/opt/lanehouse/workloads",
        "/opt/lanehouse/lanehouse.yaml",
        "/data/lake",
    }
    assert mounts["/opt/lanehouse/lanehouse.yaml"].sub_path == "lanehouse.yaml"
    assert container.resources.requests == {"cpu": "250m", "memory": "512Mi"}


def test_a_runs_dagster_k8s_config_tag_sets_its_own_resources(
    k8s_launcher: K8sRunLauncher, instance: DagsterInstance, monkeypatch: pytest.MonkeyPatch
) -> None:
    tag = {
        "container_config": {
            "resources": {"requests": {"cpu": "2", "memory": "2Gi"}, "limits": {"memory": "3Gi"}}
        },
        "pod_spec_config": {"node_selector": {"lanehouse/pool": "consumers"}},
    }
    job = launched_job(k8s_launcher, instance, monkeypatch, {"dagster-k8s/config": json.dumps(tag)})
    pod = job.spec.template.spec
    (container,) = pod.containers
    assert container.resources.requests == {"cpu": "2", "memory": "2Gi"}
    assert container.resources.limits == {"memory": "3Gi"}
    assert pod.node_selector == {"lanehouse/pool": "consumers"}
    assert pod.termination_grace_period_seconds == 45  # the instance's settings stay


def test_a_consumer_runs_tap_token_comes_from_its_secret_even_with_a_config_tag(
    k8s_launcher: K8sRunLauncher, instance: DagsterInstance, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The runs bind 0.0.0.0, where /tap needs LANEHOUSE_TAP_TOKEN: a reference to the Secret
    in the Job, never a value, and a run's own container_config does not drop it."""
    tag = {"container_config": {"resources": {"requests": {"cpu": "2"}}}}
    for tags in (None, {"dagster-k8s/config": json.dumps(tag)}):
        job = launched_job(k8s_launcher, instance, monkeypatch, tags)
        (container,) = job.spec.template.spec.containers
        (token,) = [var for var in container.env if var.name == "LANEHOUSE_TAP_TOKEN"]
        assert token.value is None
        ref = token.value_from.secret_key_ref
        assert (ref.name, ref.key, ref.optional) == ("lanehouse-tap", "token", True)


def test_without_the_docker_socket_a_terminate_fails_after_marking_the_run_canceling(
    docker_launch: tuple[DockerRunLauncher, CapturingDockerAPI, DagsterRun],
    instance: DagsterInstance,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Runs get no Docker socket, so a run that stops others (the rewind job) gets Docker's error;
    the run it stops is CANCELING by then, and a consumer run drains on that status alone."""
    launcher, _, run = docker_launch
    monkeypatch.setattr(launcher, "_get_client", DockerRunLauncher._get_client.__get__(launcher))
    monkeypatch.setenv("DOCKER_HOST", "unix:///nonexistent/docker.sock")
    with pytest.raises(docker.errors.DockerException):
        launcher.terminate(run.run_id)
    stored = instance.get_run_by_id(run.run_id)
    assert stored is not None and stored.status == DagsterRunStatus.CANCELING
