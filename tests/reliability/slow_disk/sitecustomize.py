"""A disk that crawls, for the consumer processes of the slow-disk fault
(``tests/reliability/test_faults.py``): on ``PYTHONPATH``, Python imports this at start-up and
every ``os.fsync`` then takes ``$LH_SLOW_FSYNC`` seconds longer."""

from __future__ import annotations

import os
import time
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from _typeshed import FileDescriptorLike

_fsync = os.fsync
_delay = float(os.environ.get("LH_SLOW_FSYNC", "0"))


def _slow_fsync(fd: FileDescriptorLike) -> None:
    time.sleep(_delay)
    _fsync(fd)


if _delay > 0:
    os.fsync = _slow_fsync
