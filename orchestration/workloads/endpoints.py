"""A consumer run's HTTP endpoints (``/metrics``, ``/healthz``, ``/tap/<workload>``) and how
Prometheus finds them.

Every consumer run serves them on a free port (many runs share a machine, so no fixed port),
records the address as the run tag ``lanehouse/http`` and in its progress observations, how to
read its tap as the tag ``lanehouse/tap`` and in the observations (a command that names the
token's variable, ``LANEHOUSE_TAP_TOKEN``, never its value), and,
when ``LANEHOUSE_PROMETHEUS_TARGETS`` names a directory, writes a Prometheus ``file_sd`` target
file there for as long as it runs (``lanehouse up`` sets it to ``<state>/prometheus``):

    scrape_configs:
      - job_name: lanehouse
        file_sd_configs: [{files: ["<state>/prometheus/*.json"]}]

``LANEHOUSE_RUN_HTTP_HOST`` is the address to bind (default ``127.0.0.1``; ``0.0.0.0`` in a
container, ``off`` for none), ``LANEHOUSE_RUN_HTTP_ADVERTISE`` the host name put in the address
(default: the bound address, or the machine's name when bound to every interface). Bound beyond
loopback, the tap needs ``LANEHOUSE_TAP_TOKEN`` (:mod:`consumers.service.tap_access`), read once
when the run starts serving.
"""

from __future__ import annotations

import json
import os
import socket
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Final

from consumers.service.http import Server, serve
from consumers.service.tap_access import TapAccess, token_from_env

if TYPE_CHECKING:
    from dagster import OpExecutionContext

    from consumers import ConsumerApp

__all__ = ["HTTP_TAG", "TAP_TAG", "TARGETS_ENV", "RunEndpoints", "run_endpoints"]

HTTP_TAG: Final = "lanehouse/http"
TAP_TAG: Final = "lanehouse/tap"
HOST_ENV: Final = "LANEHOUSE_RUN_HTTP_HOST"
ADVERTISE_ENV: Final = "LANEHOUSE_RUN_HTTP_ADVERTISE"
TARGETS_ENV: Final = "LANEHOUSE_PROMETHEUS_TARGETS"
_EVERY_INTERFACE: Final = ("0.0.0.0", "::")


@dataclass(frozen=True)
class RunEndpoints:
    """Where a run serves: the base URL, and how to read its tap (a command, or why it is off):
    ``tap`` for the run's tag (a host run's has ``<workload>`` for the name), :meth:`tap_of`
    for one workload."""

    url: str
    tap: str
    access: TapAccess

    def tap_of(self, workload: str) -> str:
        return self.access.how(self.url, workload)


@contextmanager
def run_endpoints(
    context: OpExecutionContext,
    app: ConsumerApp,
    workload: str,
    replica: int = 0,
    host: bool = False,
) -> Iterator[RunEndpoints | None]:
    """Serve the run's endpoints while inside; yields where (None when switched off).
    ``host``: ``workload`` is a host run's name, and each of its workloads has a tap."""
    bind = os.environ.get(HOST_ENV, "127.0.0.1").strip() or "127.0.0.1"
    if bind == "off":
        yield None
        return
    server: Server = serve(app, 0, bind, tap_token=token_from_env())
    advertised = os.environ.get(ADVERTISE_ENV, "").strip() or (
        socket.gethostname() if bind in _EVERY_INTERFACE else bind
    )
    address = f"{advertised}:{server.port}"
    url = f"http://{address}"
    endpoints = RunEndpoints(
        url, server.tap.how(url, "<workload>" if host else workload), server.tap
    )
    target = _write_target(context.run_id, workload, replica, address, host)
    try:
        context.instance.add_run_tags(context.run_id, {HTTP_TAG: url, TAP_TAG: endpoints.tap})
        who = f"host {workload}" if host else f"workload {workload}"
        context.log.info(f"{who}: {url}/metrics, {url}/healthz; tap: {endpoints.tap}")
        yield endpoints
    finally:
        server.shutdown()
        if target is not None:
            target.unlink(missing_ok=True)


def _write_target(
    run_id: str, workload: str, replica: int, address: str, host: bool
) -> Path | None:
    """A ``file_sd`` file naming this run's address, written atomically; None when not asked.
    A host run's target is labelled ``host``, not ``workload``: its series carry their own
    ``workload`` label, which a target label of the same name would rename to
    ``exported_workload``."""
    directory = os.environ.get(TARGETS_ENV, "").strip()
    if not directory:
        return None
    path = Path(directory) / f"{run_id}.json"
    path.parent.mkdir(parents=True, exist_ok=True)
    labels = (
        {"host": workload, "dagster_run_id": run_id}
        if host
        else {"workload": workload, "replica": str(replica), "dagster_run_id": run_id}
    )
    temporary = path.with_name(f".{path.name}.tmp")
    temporary.write_text(json.dumps([{"targets": [address], "labels": labels}]))
    temporary.replace(path)
    return path
