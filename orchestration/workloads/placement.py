"""Which workloads share a host run, and which host: a stable placement under a budget.

    place(members, previous, budget) -> {workload: host}

Under Dagster every run is a process of ~250 MB, where one more workload in a running engine
costs ~1.3 MB (``docs/benchmarks.md``). So workloads that need no process of their own share
*host runs* (:mod:`orchestration.workloads.host_job`), at most ``budget`` workloads each.

Stability is the rule that matters: a workload keeps its host for as long as it exists and its
host is within budget, so adding or removing a workload never restarts a neighbour. A new
workload goes to the fullest host with room (hosts stay few), else to a new host with the
smallest free number. Only a budget lowered below a host's size moves workloads: the last ones
by name leave it.
"""

from __future__ import annotations

import os
import re
from collections.abc import Iterable, Mapping
from typing import Final

from consumers import WorkloadSpec

__all__ = [
    "DEFAULT_HOST_BUDGET",
    "HOST_BUDGET_ENV",
    "check_host_budget",
    "host_budget_from_env",
    "host_name",
    "own_run_reason",
    "place",
]

#: Workloads per host run; 0 gives every workload a run of its own.
HOST_BUDGET_ENV: Final = "LANEHOUSE_HOST_WORKLOADS"
#: Workloads per host run: 50 idle ones take about 235 MB and 0.1 core in one run, where 50 runs
#: of their own take 12.5 GB (docs/benchmarks.md); a crash of the process restarts 50 at most.
DEFAULT_HOST_BUDGET: Final = 50
#: ``host.<n>``: a '.' no workload name has, so a host's heartbeat, run keys and members never
#: share a key with a workload's.
_HOST: Final = re.compile(r"host\.(\d+)")


def host_budget_from_env(env: Mapping[str, str] | None = None) -> int:
    """``LANEHOUSE_HOST_WORKLOADS`` or :data:`DEFAULT_HOST_BUDGET`; ``ValueError`` naming the
    variable when it is not a whole number (the code location then fails to load, saying so)."""
    raw = (env if env is not None else os.environ).get(HOST_BUDGET_ENV, "").strip()
    if not raw:
        return DEFAULT_HOST_BUDGET
    if not raw.isdecimal():
        raise ValueError(
            f"{HOST_BUDGET_ENV}={raw!r}: expected a whole number of workloads (0: off)"
        )
    return int(raw)


def check_host_budget(budget: int) -> int:
    """``budget`` if it is 0 (off) or more workloads per host run; ``ValueError`` naming it."""
    if budget < 0:
        raise ValueError(f"host_workloads={budget}: expected 0 (off) or more workloads per run")
    return budget


def host_name(number: int) -> str:
    """The host's partition key: ``host.0``, ``host.1``, ..."""
    return f"host.{number}"


def own_run_reason(spec: WorkloadSpec) -> str | None:
    """Why ``spec`` needs a run of its own, or None when it can share a host run."""
    if spec.run == "own":
        return "run: own"
    if spec.replicas.max > 1:
        return "replicas above 1 (each replica is a run)"
    if spec.executor == "process":
        return "executor: process (its worker processes are its own)"
    return None


def place(members: Iterable[str], previous: Mapping[str, str], budget: int) -> dict[str, str]:
    """Each of ``members`` (workload names) on a host, keeping ``previous`` where it can.

    ``budget`` (at least 1) is the most workloads per host.
    """
    if budget < 1:
        raise ValueError(f"a host budget is at least 1 workload, got {budget}")
    names = sorted(set(members))
    hosts: dict[str, list[str]] = {}
    for name in names:
        host = previous.get(name)
        if host is not None and _HOST.fullmatch(host):
            hosts.setdefault(host, []).append(name)
    placed: dict[str, str] = {}
    for host, on_it in hosts.items():
        for name in on_it[:budget]:  # sorted: a lowered budget moves the last names
            placed[name] = host
    sizes = {host: min(len(on_it), budget) for host, on_it in hosts.items()}
    for name in names:
        if name in placed:
            continue
        room = [h for h, size in sizes.items() if size < budget]
        if room:
            host = max(room, key=lambda h: (sizes[h], -_number(h)))
        else:
            host = host_name(_smallest_free(sizes))
        placed[name] = host
        sizes[host] = sizes.get(host, 0) + 1
    return placed


def _number(host: str) -> int:
    match = _HOST.fullmatch(host)
    return int(match.group(1)) if match else -1


def _smallest_free(sizes: Mapping[str, int]) -> int:
    used = {_number(h) for h, size in sizes.items() if size}
    return next(i for i in range(len(used) + 1) if i not in used)
