"""The dead-letter safety valve's window: which of the last ``window`` resolved records went to
the dead-letter topic, so the workload stops before more than ``max_ratio`` of them would."""

from __future__ import annotations

import math
from collections import deque


class ValveWindow:
    """The last ``window`` resolutions (dead-lettered or not) and how many were dead letters."""

    def __init__(self, window: int, max_ratio: float) -> None:
        self._recent: deque[bool] = deque(maxlen=window)
        self._allowed = max_ratio * window
        self.dead = 0

    def would_trip(self) -> bool:
        """Whether one more dead letter would exceed what the valve allows."""
        return self.dead + 1 > self._allowed

    def count(self, dead: bool) -> None:
        recent = self._recent
        if len(recent) == recent.maxlen and recent[0]:
            self.dead -= 1
        recent.append(dead)
        self.dead += dead

    @property
    def used(self) -> float:
        """Dead letters in the window over the most it can hold: at 1 the next one stops the
        workload (``max_ratio x window`` rounded down; the spec makes it at least 1)."""
        return self.dead / max(math.floor(self._allowed), 1)
