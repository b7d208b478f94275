"""The workload assets as observable source assets: a workload is observed, never materialized.

Declared as plain asset specs, a workload's page offered **Materialize** and said "Never
materialized" for an asset whose whole history is observations. As observable source assets
their pages offer **Observe** and show when they were last observed. Observing one (from its
page, or the catalog for several) reads its figures from the broker now: a still workload's
phase and lag (:func:`~orchestration.workloads.standstill.standstill_figures`), a running one's
lag as its group's committed offsets hold it (its runs keep reporting their own figures). The
run also judges the workload's checks, from the live runs' latest reports as always.
"""

# No ``from __future__ import annotations``: Dagster reads the function's ``context``
# annotation as a class (a string there fails its check, as in health.py).
from collections.abc import Callable, Iterator, Sequence
from typing import cast

from dagster import AssetExecutionContext, AssetsDefinition, ObserveResult
from dagster import multi_observable_source_asset as observable

from consumers.config.spec import WorkloadSpec
from consumers.errors import LanehouseError
from consumers.scaling.lag import Lag
from orchestration.workloads.assets import workload_assets, workload_key
from orchestration.workloads.names import workloads_dir
from orchestration.workloads.standstill import broker_figures, standing_still, standstill_figures
from orchestration.workloads.status import collect_statuses

__all__ = ["observable_workloads"]


def observable_workloads(specs: Sequence[WorkloadSpec]) -> list[AssetsDefinition]:
    """One observable source asset per workload (:func:`workload_assets`), observed together."""
    if not specs:
        return []
    by_key = {workload_key(spec.name): spec for spec in specs}

    def observe(context: AssetExecutionContext) -> Iterator[ObserveResult]:
        chosen = [spec for key, spec in by_key.items() if key in context.selected_asset_keys]
        phases = _phases(context, chosen)
        for spec in chosen:
            phase = phases.get(spec.name)
            if phase is not None:
                figures = standstill_figures(spec, phase)
            else:
                figures = {"workload": spec.name, **broker_figures(spec)}
            yield ObserveResult(asset_key=workload_key(spec.name), metadata=figures)

    decorate = cast(
        Callable[[Callable[[AssetExecutionContext], Iterator[ObserveResult]]], AssetsDefinition],
        observable(
            specs=workload_assets(specs),
            name="observe_workloads",
            can_subset=True,
            description="Reads each selected workload's figures from its broker now.",
        ),
    )
    _observe = decorate(observe)
    return [_observe]


def _phases(context: AssetExecutionContext, specs: Sequence[WorkloadSpec]) -> dict[str, str]:
    """The phase of each still workload among ``specs``, as ``lanehouse workloads`` says."""

    def later(spec: WorkloadSpec) -> Lag:
        raise LanehouseError("measured by the observation itself")

    statuses = collect_statuses(
        context.instance, workloads_dir(), [spec.name for spec in specs], measure=later
    )
    return {s.name: s.phase for s in statuses if standing_still(s.phase, s.replicas_running)}
