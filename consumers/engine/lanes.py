"""Which lane a record joins. A lane (:class:`consumers.engine.partition.Lane`) is the unit of
ordering: it runs one record at a time, in arrival order.

Ordering modes decide the lane:

- ``key``: one lane per distinct key, made on demand and freed when empty, so memory follows
  the records in flight, not the key count, and one slow key never blocks another;
- ``key`` with ``virtual_partitions: N``: keys hashed (xxhash, stable across processes; never
  Python's salted ``hash``) into N lanes per partition;
- ``partition``: one lane per partition;
- ``none``: one *unordered* lane per partition whose records may all run at once.

Records without a key are ordered by partition in the key modes.
"""

from __future__ import annotations

from collections.abc import Callable, Hashable
from typing import Literal

import xxhash

Ordering = Literal["key", "partition", "none"]

#: Lane id for records that are ordered by partition (no key, or ``partition`` mode).
PARTITION_LANE: Hashable = ("__partition__",)


def lane_router(ordering: Ordering, virtual_partitions: int) -> Callable[[bytes | None], Hashable]:
    """Return the function mapping a record key to its lane id within a partition."""
    if ordering in ("partition", "none"):
        return lambda key: PARTITION_LANE
    if virtual_partitions > 0:
        n = virtual_partitions
        digest = xxhash.xxh3_64_intdigest

        def by_hash(key: bytes | None) -> Hashable:
            return PARTITION_LANE if key is None else digest(key) % n

        return by_hash
    return lambda key: PARTITION_LANE if key is None else key
