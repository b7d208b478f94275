"""``consumers/engine/lanes.py``: which lane a record joins in each ordering mode.

A key's records must always meet in one lane (that is the order promise), keys must spread over
virtual partitions the same way in every process (a replica, a restart), and records without a
key fall back to the partition's order.
"""

from __future__ import annotations

import subprocess
import sys

from consumers.engine.lanes import PARTITION_LANE, lane_router
from tests.support.processes import REPO

KEYS = [f"user-{i}".encode() for i in range(2_000)]


def test_key_mode_gives_each_key_its_own_lane_and_keyless_records_the_partitions() -> None:
    route = lane_router("key", 0)
    assert len({route(k) for k in KEYS}) == len(KEYS)
    assert route(b"a") == route(b"a") != route(b"b")
    assert route(None) == PARTITION_LANE


def test_partition_and_none_modes_have_one_lane_per_partition() -> None:
    for mode in ("partition", "none"):
        route = lane_router(mode, 0)
        assert {route(k) for k in [*KEYS[:10], None]} == {PARTITION_LANE}


def test_virtual_partitions_spread_keys_over_exactly_n_lanes() -> None:
    route = lane_router("key", 8)
    lanes = [route(k) for k in KEYS]
    assert set(lanes) == set(range(8))
    assert min(lanes.count(n) for n in range(8)) > len(KEYS) / 8 / 2  # no lane starved
    assert [route(k) for k in KEYS] == lanes  # the same key, the same lane
    assert route(None) == PARTITION_LANE


def test_virtual_lanes_are_the_same_in_another_process() -> None:
    """Python's own ``hash`` of bytes is salted per process; the lanes must not be."""
    script = (
        "from consumers.engine.lanes import lane_router\n"
        "route = lane_router('key', 8)\n"
        "print([route(f'user-{i}'.encode()) for i in range(200)])\n"
    )
    outputs = {
        subprocess.run(
            [sys.executable, "-c", script],
            capture_output=True,
            text=True,
            check=True,
            env={"PYTHONHASHSEED": seed, "PATH": ""},
            cwd=REPO,
        ).stdout
        for seed in ("1", "2")
    }
    route = lane_router("key", 8)
    assert outputs == {f"{[route(k) for k in KEYS[:200]]}\n"}
