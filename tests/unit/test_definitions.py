"""The Dagster code location loads and declares every workload topic as a source asset."""

from __future__ import annotations

from pathlib import Path

import pytest

pytestmark = pytest.mark.unit


def test_definitions_load_with_topic_assets() -> None:
    from dagster import AssetKey, Definitions

    from orchestration.definitions import defs

    Definitions.validate_loadable(defs)
    keys = {spec.key for spec in defs.resolve_all_asset_specs()}
    assert AssetKey(["topics", "clickstream_events"]) in keys


def test_a_bad_spec_fails_loading_with_file_and_field(tmp_path: Path) -> None:
    from consumers.errors import SpecError
    from orchestration.definitions import build_definitions

    (tmp_path / "bad.yaml").write_text("name: ../x\n")
    with pytest.raises(SpecError, match=r"bad\.yaml: name"):
        build_definitions(tmp_path)
