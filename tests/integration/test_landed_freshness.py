"""Landed datasets carry Dagster's ``FreshnessPolicy`` (the freshness-check factory they had is
superseded since Dagster 1.13): the real freshness daemon, against an in-process code location,
says a dataset landed within the window PASS and one whose newest file is older FAIL."""

from __future__ import annotations

import os
import time
from pathlib import Path

import pytest
from dagster import AssetKey, AssetMaterialization, instance_for_test
from dagster._core.definitions.freshness import FreshnessState
from dagster._core.remote_origin import InProcessCodeLocationOrigin
from dagster._core.test_utils import create_test_daemon_workspace_context, freeze_time
from dagster._core.types.loadable_target_origin import LoadableTargetOrigin
from dagster._core.workspace.load_target import InProcessWorkspaceLoadTarget
from dagster._daemon.freshness import FreshnessDaemon

from orchestration.lake.landed import landed_max_age
from orchestration.local.instance import instance_config
from tests.support import freshness_defs

pytestmark = pytest.mark.integration

CLICKS, ORDERS = AssetKey("landed_clickstream"), AssetKey("landed_orders")


def test_the_freshness_daemon_judges_landed_datasets(tmp_path: Path) -> None:
    assert instance_config()["freshness"] == {"enabled": True}  # what `up` writes
    origin = LoadableTargetOrigin(
        python_file=freshness_defs.__file__, attribute="defs", working_directory=os.getcwd()
    )
    target = InProcessWorkspaceLoadTarget(InProcessCodeLocationOrigin(origin))
    now = time.time()
    with (
        instance_for_test(
            temp_dir=str(tmp_path), overrides={"freshness": {"enabled": True}}
        ) as instance,
        create_test_daemon_workspace_context(target, instance) as workspace,
    ):
        with freeze_time(now - landed_max_age().total_seconds() - 60):  # landed too long ago
            instance.report_runless_asset_event(
                AssetMaterialization(ORDERS, partition="2026-11-25")
            )
        instance.report_runless_asset_event(AssetMaterialization(CLICKS, partition="2026-11-26"))
        daemon = FreshnessDaemon()
        list(daemon.run_iteration(workspace))
        states = instance.get_freshness_state_records([CLICKS, ORDERS])
    assert {key: record.freshness_state for key, record in states.items()} == {
        CLICKS: FreshnessState.PASS,
        ORDERS: FreshnessState.FAIL,
    }
