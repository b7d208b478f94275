"""/tap/<workload> beyond loopback, over real sockets: a bearer token or nothing.

"Beyond loopback" is the server's bind address: these servers bind 0.0.0.0 (every interface of
this machine) and the client connects to 127.0.0.1, so no traffic leaves the machine, and the
rule is seen to follow the bind address, not the client's (which is local here, as it is behind
a port-forward). The token is made per test and checked absent from every log line, run tag,
observation and page.
"""

from __future__ import annotations

import asyncio
import http.client
import json
import logging
import secrets
from collections.abc import Callable
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest
from dagster import AssetObservation
from pydantic import SecretStr

from consumers import ConsumerApp, WorkloadSpec
from consumers.service.tap_access import TOKEN_ENV
from orchestration.workloads.endpoints import HTTP_TAG, TAP_TAG, run_endpoints
from orchestration.workloads.reporting import Reporter
from tests.backends import MemoryBackend
from tests.integration.test_http import NAME, make_app, produce, running, serving

pytestmark = pytest.mark.integration

EVERY_INTERFACE = "0.0.0.0"


def request(port: int, path: str, authorization: str | None = None) -> tuple[int, bytes, str]:
    """A GET to 127.0.0.1; the status, the body, and the head as text."""
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=10)
    try:
        conn.request("GET", path, headers={"Authorization": authorization} if authorization else {})
        resp = conn.getresponse()
        return resp.status, resp.read(), str(resp.headers)
    finally:
        conn.close()


async def stream(
    app: ConsumerApp,
    port: int,
    limit: int,
    authorization: str | None = None,
    then: Callable[[], object] | None = None,
) -> tuple[int, list[dict[str, Any]]]:
    """Subscribe to the tap, then run the app until ``limit`` records came through (and
    ``then`` ran, while the app still runs)."""
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=10)
    headers = {"Authorization": authorization} if authorization else {}
    try:
        conn.request("GET", f"/tap/{NAME}?limit={limit}", headers=headers)
        resp = await asyncio.to_thread(conn.getresponse)  # the head comes once subscribed
        if resp.status != 200:
            return resp.status, []
        async with running(app):
            body = await asyncio.to_thread(resp.read)  # the server ends it after ``limit``
            if then is not None:
                then()
    finally:
        conn.close()
    lines = body.decode().splitlines()
    return 200, [json.loads(line[6:]) for line in lines if line.startswith("data: ")]


def keyed_app(group: str, records: int = 0) -> ConsumerApp:
    backend = MemoryBackend()
    topic = backend.make_topic(2)
    produce(backend, topic, records, keys=5)
    return make_app(backend, topic, group)


def test_beyond_loopback_without_a_token_the_tap_is_off_while_metrics_and_health_serve() -> None:
    app = keyed_app("g-off")
    with serving(app, addr=EVERY_INTERFACE) as server:
        assert server.addr == EVERY_INTERFACE
        for path, authorization in (
            (f"/tap/{NAME}", None),
            (f"/tap/{NAME}?limit=1", "Bearer anything"),
            ("/tap/nope", None),  # refused before any lookup: the names stay unknown
        ):
            status, body, _ = request(server.port, path, authorization)
            assert status == 403, (path, body)
            assert TOKEN_ENV.encode() in body and b"the tap is off" in body
            assert b"nope" not in body
        status, body, _ = request(server.port, "/metrics")
        assert status == 200 and b"lanehouse_" in body
        status, body, _ = request(server.port, "/healthz")  # answers; not ready, not started
        assert status == 503 and json.loads(body)["workloads"][NAME]["reason"] == "not started"


def test_beyond_loopback_a_missing_or_wrong_key_is_401() -> None:
    token = secrets.token_urlsafe(32)
    app = keyed_app("g-401")
    with serving(app, addr=EVERY_INTERFACE, tap_token=SecretStr(token)) as server:
        for path, authorization, error in (
            (f"/tap/{NAME}", None, False),
            (f"/tap/{NAME}", f"Basic {token}", False),
            (f"/tap/{NAME}", f"Bearer {token}x", True),
            (f"/tap/{NAME}", f"Bearer {token[:-1]}", True),
            (f"/tap/{NAME}", f"Bearer {secrets.token_urlsafe(32)}", True),
            ("/tap/nope", None, False),  # not 404: without the key, no workload names
        ):
            status, body, head = request(server.port, path, authorization)
            assert status == 401, (path, authorization, body)
            assert 'WWW-Authenticate: Bearer realm="lanehouse tap"' in head
            assert ('error="invalid_token"' in head) is error
            assert TOKEN_ENV.encode() in body and b"nope" not in body
            assert token.encode() not in body and token not in head
        assert request(server.port, "/metrics")[0] == 200


async def test_beyond_loopback_the_key_opens_the_stream() -> None:
    token = secrets.token_urlsafe(32)
    app = keyed_app("g-key", records=40)
    with serving(app, addr=EVERY_INTERFACE, tap_token=SecretStr(token)) as server:
        status, events = await stream(app, server.port, 5, f"Bearer {token}")
    assert status == 200
    assert len(events) == 5
    assert all(event["workload"] == NAME and event["key"].startswith("k") for event in events)
    assert all(event["value_preview"].startswith('{"key"') for event in events)


async def test_on_loopback_the_tap_streams_without_a_key_even_with_a_token_set() -> None:
    app = keyed_app("g-loopback", records=40)
    with serving(app, addr="127.0.0.1", tap_token=SecretStr(secrets.token_urlsafe(32))) as server:
        status, events = await stream(app, server.port, 5)
    assert status == 200 and len(events) == 5


def refused_pages_and_targets(port: int, token: str, targets: Path) -> list[str]:
    """The pages a wrong or missing key gets (all 401), and the run's Prometheus target."""
    shown = [path.read_text() for path in targets.glob("*.json")]
    for authorization in (None, f"Bearer {token[::-1]}", f"Basic {token}"):
        status, body, head = request(port, f"/tap/{NAME}", authorization)
        assert status == 401
        shown += [body.decode(), head]
    return shown


def tap_spec() -> WorkloadSpec:
    """The workload the run reports on (its source is never reached)."""
    return WorkloadSpec.model_validate(
        {
            "name": NAME,
            "source": {"kind": "kafka", "bootstrap_servers": "127.0.0.1:9", "topics": ["t"]},
            "handler": "consumers.dev.examples:enrich",
        }
    )


class RunContext:
    """What run_endpoints and the Reporter use of an op's context, recorded."""

    run_id = "tap-auth-run"

    def __init__(self) -> None:
        self.tags: dict[str, str] = {}
        self.lines: list[str] = []
        self.events: list[Any] = []
        self.instance = SimpleNamespace(add_run_tags=lambda run_id, tags: self.tags.update(tags))
        self.log = SimpleNamespace(
            info=self.lines.append, warning=self.lines.append, error=self.lines.append
        )

    def log_event(self, event: Any) -> None:
        self.events.append(event)

    def consume_events(self) -> list[Any]:
        return []


async def test_a_run_shows_how_to_read_its_tap_and_the_token_nowhere(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    """Logs, run tags, the asset's observation, the Prometheus target and every page."""
    caplog.set_level(logging.DEBUG)
    token = secrets.token_urlsafe(32)
    monkeypatch.setenv(TOKEN_ENV, token)
    monkeypatch.setenv("LANEHOUSE_RUN_HTTP_HOST", EVERY_INTERFACE)
    monkeypatch.setenv("LANEHOUSE_RUN_HTTP_ADVERTISE", "127.0.0.1")
    monkeypatch.setenv("LANEHOUSE_PROMETHEUS_TARGETS", str(tmp_path))
    app = keyed_app("g-run", records=40)
    spec = tap_spec()
    context = RunContext()
    shown: list[str] = []
    with run_endpoints(context, app, NAME) as endpoints:  # type: ignore[arg-type]
        assert endpoints is not None
        monkeypatch.delenv(TOKEN_ENV)  # read once, at the start: the server keeps it
        port = int(endpoints.url.rsplit(":", 1)[1])
        shown += await asyncio.to_thread(refused_pages_and_targets, port, token, tmp_path)
        reporter = Reporter(context, app, spec)  # type: ignore[arg-type]
        reporter.link(endpoints)
        status, events = await stream(
            app, port, 3, f"Bearer {token}", then=lambda: reporter.observe("running")
        )
        assert status == 200 and len(events) == 3
    (observation,) = [e for e in context.events if isinstance(e, AssetObservation)]
    metadata = {key: value.value for key, value in observation.metadata.items()}
    how = f'curl -sN -H "Authorization: Bearer ${TOKEN_ENV}" {endpoints.url}/tap/{NAME}'
    assert context.tags[HTTP_TAG] == endpoints.url
    assert context.tags[TAP_TAG] == endpoints.tap == metadata["tap"] == how
    assert any(how in line for line in context.lines)
    assert "/tap needs" in caplog.text
    shown += [caplog.text, *context.lines, json.dumps(context.tags), repr(metadata)]
    assert any('"targets"' in text for text in shown)  # the file_sd target was looked at
    assert not [text for text in shown if token in text]


async def test_a_host_run_shows_each_workload_its_own_tap() -> None:
    """A host run serves one ``/tap/<workload>`` per member: its run says so, and each member's
    page names its own, never the host's name."""
    app = keyed_app("g-host", records=1)
    spec = tap_spec()
    context = RunContext()
    with run_endpoints(context, app, "host.0", host=True) as endpoints:  # type: ignore[arg-type]
        assert endpoints is not None
        reporter = Reporter(context, app, spec, tag_assignment=False)  # type: ignore[arg-type]
        reporter.link(endpoints)
        port = int(endpoints.url.rsplit(":", 1)[1])
        status, _ = await stream(app, port, 1, then=lambda: reporter.observe("running"))
        assert status == 200  # the member's own tap answers
    (observation,) = [e for e in context.events if isinstance(e, AssetObservation)]
    tap = observation.metadata["tap"].value
    assert tap == f"curl -sN {endpoints.url}/tap/{NAME}", tap
    assert context.tags[TAP_TAG] == f"curl -sN {endpoints.url}/tap/<workload>"
    assert any(line.startswith("host host.0: ") for line in context.lines), context.lines
