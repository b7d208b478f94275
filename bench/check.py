"""What every bench contender reports, whatever library it runs: standard library only.

The peers (Quix Streams, Arroyo) run in their own virtual environments without Lanehouse, so
this module must import nothing but the standard library. A contender calls ``begin`` when its
handler starts a record, ``end`` when it finished, and prints ``result()`` as one JSON line.

Per-key state is a flat array indexed by the key's number (sample keys are ``k0``, ``k1``...):
four bytes a key, so the memory rows (up to 1M keys) measure the contender, not the check.
"""

from __future__ import annotations

import time
from array import array
from typing import Any

#: Bytes between ``"seq":`` and the next comma in a sample value (``consumers.dev.sample``).
_SEQ = b'"seq":'


def seq_of(value: bytes) -> int:
    """``seq`` from a sample value without a full JSON parse."""
    i = value.index(_SEQ) + 6
    return int(value[i : value.index(b",", i)])


#: Rounds of :func:`burn`; about 200 µs of one core on the bench machine (BURN_US).
BURN_ROUNDS = 2_000
BURN_US = 200


def burn(value: bytes) -> int:
    """CPU-bound pure Python, about ``BURN_US`` µs a call: integer mixing seeded from the
    value, holding the GIL throughout (no sleeping, no C call that releases it)."""
    x = len(value) + (value[0] if value else 0)
    for i in range(BURN_ROUNDS):
        x = (x * 1_103_515_245 + i) & 0xFFFFFFFF
    return x


def key_index(key: bytes) -> int:
    """``k123`` -> 123 (the sample's key names)."""
    return int(key[1:])


class Check:
    """Counts completions (a timestamp every 1,000 and at the last), per-key order, log ends.

    Order: a key's records must start in ``seq`` order (seq = last + 1) and never two at once.
    ``high`` is the log end (last offset + 1) seen per partition, for the all-committed check.
    """

    def __init__(self, records: int, keys: int) -> None:
        self.records, self.done, self.stamped = records, 0, 0
        self.stamps: list[tuple[int, float]] = []
        self.t0 = self.t1 = self.cpu0 = self.cpu1 = 0.0
        self.last = array("i", [-1]) * keys
        self.active: set[bytes | None] = set()
        self.high: dict[int, int] = {}
        self.violations = 0
        self.injected = 0  # first attempts a fail_once handler failed on purpose
        self.sink: Any = None  # a transform's output, so the transform is not dead code

    def start_clock(self) -> None:
        self.t0, self.cpu0 = time.perf_counter(), time.process_time()

    def tick(self, n: int) -> None:
        self.done += n
        if self.done - self.stamped >= 1000 or self.done >= self.records:
            self.stamped = self.done
            self.stamps.append((self.done, time.perf_counter()))
            if self.done >= self.records and not self.t1:
                self.t1, self.cpu1 = time.perf_counter(), time.process_time()

    def begin(self, key: bytes, seq: int) -> None:
        if not self.t0:
            self.start_clock()
        k = key_index(key)
        if key in self.active or seq != self.last[k] + 1:
            self.violations += 1
        self.active.add(key)
        self.last[k] = seq

    def fail(self, key: bytes, seq: int) -> None:
        """An attempt failed on purpose: its key is free again and ``seq`` is not counted yet
        (its lane is held, so the retry must be the key's next record)."""
        self.active.discard(key)
        self.last[key_index(key)] = seq - 1
        self.injected += 1

    def end(self, key: bytes, partition: int, offset: int) -> None:
        self.active.discard(key)
        if offset >= self.high.get(partition, 0):
            self.high[partition] = offset + 1
        self.tick(1)

    def result(self) -> dict[str, Any]:
        """The JSON line a contender prints; the parent (``bench.engine``) checks and rates it."""
        return {
            "done": self.done,
            "stamps": self.stamps,
            "window_s": self.t1 - self.t0,
            "window_cpu_s": self.cpu1 - self.cpu0,
            "high": self.high,
            "violations": self.violations,
            "injected": self.injected,
            "busiest_key": max(self.last, default=-1) + 1,
            "cpu_total_s": time.process_time(),
            "peak_rss_mb": peak_rss_mb(),
        }


def peak_rss_mb() -> float:
    """This process's own peak RSS. Not ``ru_maxrss``: after fork + exec Linux carries the
    parent's peak over into the child's, so every child would report at least the parent."""
    with open("/proc/self/status") as status:
        for line in status:
            if line.startswith("VmHWM:"):
                return int(line.split()[1]) / 1024
    raise RuntimeError("no VmHWM in /proc/self/status")
