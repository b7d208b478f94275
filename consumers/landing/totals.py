"""A landed day's totals, counted from what is on disk.

A consumer run reports each day's new files every few seconds; a person reading the day's
partition wants the day's rows, which other runs, replicas and earlier sessions landed too. The
lake is the one account of them: a replay replaces files under their own names and a rewind
removes or cuts them, so adding up reports would drift. Each file's row count comes from its
Parquet footer, read once while the file is unchanged (same size and modification time), so a
report costs a directory listing and the footers of the files new since the last one.
"""

from __future__ import annotations

import logging
import os
import threading
from collections import OrderedDict
from collections.abc import Iterable
from pathlib import Path
from typing import Final

log = logging.getLogger(__name__)

#: Day directories whose footers are remembered (a run lands into today and a few late days).
REMEMBERED_DAYS: Final = 8


class DayTotals:
    """Rows and files of a landed day directory, with footers remembered per file. A run warms
    it in a thread and reads it on its loop; a lock keeps the two apart when they meet (the
    run's last report while a warm-up it no longer waits for still runs)."""

    def __init__(self, remembered_days: int = REMEMBERED_DAYS) -> None:
        self._lock = threading.Lock()
        self._remembered = remembered_days
        #: day directory -> file name -> (size, mtime_ns, rows), least recently asked first.
        self._days: OrderedDict[Path, dict[str, tuple[int, int, int]]] = OrderedDict()

    def warm(self, directories: Iterable[Path]) -> None:
        """Read the footers of files new in ``directories`` now, so a report reads few."""
        for directory in directories:
            self.of(directory)

    def of(self, directory: Path) -> tuple[int, int]:
        """``(rows, files)`` of the Parquet files Spark reads in ``directory`` (names starting
        with ``.`` or ``_`` are skipped: temporaries and markers)."""
        with self._lock:
            return self._count(directory)

    def _count(self, directory: Path) -> tuple[int, int]:
        import pyarrow.parquet as pq

        known = self._days.pop(directory, {})
        current: dict[str, tuple[int, int, int]] = {}
        try:
            entries = list(os.scandir(directory))
        except FileNotFoundError:
            entries = []
        for entry in entries:
            name = entry.name
            if not name.endswith(".parquet") or name.startswith((".", "_")):
                continue
            try:
                stat = entry.stat()
                seen = known.get(name)
                if seen is None or seen[:2] != (stat.st_size, stat.st_mtime_ns):
                    rows = pq.read_metadata(entry.path).num_rows
                    seen = (stat.st_size, stat.st_mtime_ns, rows)
            except FileNotFoundError:
                continue  # removed since the listing (a rewind, or a replay's clean-up)
            except Exception as exc:  # one unreadable file must not stop every report
                log.warning("%s: left out of the day's totals: %s", entry.path, exc)
                continue
            current[name] = seen
        self._days[directory] = current
        while len(self._days) > self._remembered:
            self._days.popitem(last=False)
        return sum(rows for _, _, rows in current.values()), len(current)
