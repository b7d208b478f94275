"""What both peer children share: their command line, client settings, and how they stop.

Standard library only, like ``bench/check.py``: the children run in the peers' own venvs. They
import it as ``common`` (a script's own directory is first on ``sys.path``).
"""

from __future__ import annotations

import argparse
import json
import threading
from collections.abc import Callable

from check import Check

#: The 20 ms handler's wait, as in bench/engine.py.
SLEEP = 0.020
#: The client settings every contender gets (bench/engine.py's CLIENT, where a library passes
#: librdkafka settings through).
CLIENT = {
    "fetch.queue.backoff.ms": 10,
    "fetch.wait.max.ms": 10,
    "session.timeout.ms": 2000,
    "heartbeat.interval.ms": 500,
    "partition.assignment.strategy": "range",
    "enable.partition.eof": False,
}


def parse_args(description: str) -> argparse.Namespace:
    """The command line bench/engine.py gives every peer child."""
    p = argparse.ArgumentParser(description=description)
    p.add_argument("--broker", required=True)
    p.add_argument("--topic", required=True)
    p.add_argument("--group", required=True)
    p.add_argument("--records", type=int, required=True)
    p.add_argument("--keys", type=int, required=True)
    # sleep is a synchronous time.sleep: neither peer has async handlers; cpu is check.burn.
    p.add_argument("--kind", choices=["noop", "json", "sleep", "cpu"], required=True)
    p.add_argument("--concurrency", type=int, default=1)
    p.add_argument("--timeout", type=float, default=300.0)
    return p.parse_args()


def run_and_report(
    run: Callable[[], None], stop: Callable[[], None], timeout: float, check: Check
) -> int:
    """Run the library's loop (stopped by its handler when done, or by a timer at ``timeout``),
    then print the check's result as the last line of stdout."""
    timer = threading.Timer(timeout, stop)
    timer.daemon = True
    timer.start()
    try:
        run()
    finally:
        timer.cancel()
    print(json.dumps(check.result()), flush=True)
    return 0
