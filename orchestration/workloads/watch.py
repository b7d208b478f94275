"""What the discovery sensor remembers between ticks in its own process (not in the cursor:
losing it only repeats an observation, a reload request or a write of a host's members)."""

from __future__ import annotations

from collections.abc import Mapping

from dagster import AssetObservation

from orchestration.workloads.assets import workload_key
from orchestration.workloads.names import unit_workload
from orchestration.workloads.registry import Registry
from orchestration.workloads.reload import Reloader
from orchestration.workloads.standstill import StillWatch

__all__ = ["Watch"]


class Watch:
    """What the sensor remembers between ticks in its process (not in the cursor: losing it only
    repeats an observation): each workload's last phase as observed on its asset, when it last
    observed a still workload's lag, the code-location reloads it asked for, and each host's
    members as last written."""

    def __init__(self) -> None:
        self.reloader = Reloader()
        self.still = StillWatch()
        self._phases: dict[str, tuple[str, int, int]] = {}
        self._members: dict[str, dict[str, str]] = {}

    def members_changed(
        self, members: Mapping[str, Mapping[str, str]]
    ) -> dict[str, dict[str, str]]:
        """The hosts whose members differ from what this process last wrote (all of them after
        a restart of the process): a tick writes only those."""
        return {h: dict(m) for h, m in members.items() if self._members.get(h) != m}

    def members_written(self, members: Mapping[str, Mapping[str, str]]) -> None:
        """After the write succeeded (a failed one raises, and the next tick writes again)."""
        self._members.update({h: dict(m) for h, m in members.items()})

    def phase_changes(
        self, phases: Mapping[str, str], registry: Registry, wanted: Mapping[str, int]
    ) -> list[AssetObservation]:
        """An observation of each workload's asset whose phase (its replica 0's), count of
        running replicas or wanted count (``wanted``: autoscaling's, else the spec's) changed."""
        running: dict[str, int] = {}
        for unit, phase in phases.items():
            name = unit_workload(unit)[0]
            running[name] = running.get(name, 0) + (phase == "running")
        out = []
        for name in self._phases.keys() - registry.workloads.keys():
            del self._phases[name]  # removed: a workload added again is observed afresh
        for unit, phase in sorted(phases.items()):
            name, replica = unit_workload(unit)
            entry = registry.workloads.get(name)
            if replica != 0 or phase == "removed" or entry is None:
                continue
            seen = (phase, running[name], wanted.get(name, entry.spec.replicas.min))
            if self._phases.get(name) == seen:
                continue
            self._phases[name] = seen
            metadata: dict[str, str | int] = {
                "workload": name,
                "status": phase,
                "replicas_running": seen[1],
                "replicas_wanted": seen[2],
            }
            out.append(AssetObservation(asset_key=workload_key(name), metadata=metadata))
        return out
