"""The backfill request ``lanehouse backfill`` sends, against the real Dagster GraphQL schema.

No webserver: the same schema executes in-process against the code location (loaded in a
code server subprocess, as ``dagster dev`` does) and a temporary instance, which stores the
asset backfill the daemon would then run. Running it is left to the end-to-end UI test.
"""

from __future__ import annotations

from collections.abc import Iterator
from datetime import date
from pathlib import Path

import pytest
from dagster import AssetKey, DagsterInstance, instance_for_test
from dagster._core.workspace.context import WorkspaceRequestContext

from orchestration.lake.runs import SPARK_RUN_TAG
from orchestration.shop.backfill import BACKFILL_MUTATION, backfill_variables

pytestmark = pytest.mark.integration

WORKSPACE = Path(__file__).resolve().parents[2] / "workspace.yaml"


@pytest.fixture(scope="module")
def server() -> Iterator[tuple[DagsterInstance, WorkspaceRequestContext]]:
    """One code server for the module: it takes seconds to load the definitions."""
    # Imported here: it costs every xdist worker ~1.5 s of collection at module level.
    from dagster_graphql.test.utils import define_out_of_process_context

    with (
        instance_for_test() as instance,
        define_out_of_process_context(str(WORKSPACE), None, instance) as context,
    ):
        yield instance, context


def test_the_backfill_mutation_creates_one_asset_backfill_over_the_range(
    server: tuple[DagsterInstance, WorkspaceRequestContext],
) -> None:
    from dagster_graphql.test.utils import execute_dagster_graphql

    instance, context = server
    assets = ["clean_clicks", "click_quarantine", "click_duplicates", "sessions"]
    days = [date(2026, 3, 1), date(2026, 3, 2), date(2026, 3, 3)]
    result = execute_dagster_graphql(context, BACKFILL_MUTATION, backfill_variables(assets, days))
    assert result.errors is None, result.errors
    launched = result.data["launchPartitionBackfill"]
    assert launched["__typename"] == "LaunchBackfillSuccess", launched
    backfill = instance.get_backfill(launched["backfillId"])
    assert backfill is not None
    assert backfill.tags[SPARK_RUN_TAG] == "backfill"
    assert backfill.asset_selection is not None
    assert set(backfill.asset_selection) == {AssetKey(name) for name in assets}
    subset = backfill.asset_backfill_data.target_subset  # type: ignore[union-attr]
    assert set(subset.asset_keys) == {AssetKey(name) for name in assets}
    for name in assets:
        keys = subset.get_partitions_subset(AssetKey(name)).get_partition_keys()
        assert sorted(keys) == ["2026-03-01", "2026-03-02", "2026-03-03"]


def test_an_unknown_asset_is_refused_by_the_server(
    server: tuple[DagsterInstance, WorkspaceRequestContext],
) -> None:
    from dagster_graphql.test.utils import execute_dagster_graphql

    _, context = server
    variables = backfill_variables(["nope"], [date(2026, 3, 1)])
    result = execute_dagster_graphql(context, BACKFILL_MUTATION, variables)
    launched = (result.data or {}).get("launchPartitionBackfill")
    assert result.errors or (
        launched is not None and launched["__typename"] != "LaunchBackfillSuccess"
    ), launched
