"""The Pulsar source's own cost a message, on the thread that runs it, with no engine around it:
``PulsarConsumer.consume`` (receive and wrap) and ``commit`` (acknowledge), against an embedded
pulsar-lite (``docs/benchmarks.md``, "What bounds the goals left").

CPU time is the calling thread's (``time.thread_time``), so the client's own C++ threads are
not in it. Run from the checkout whose source you want measured (``PYTHONPATH`` another one to
compare)::

    python -m bench.pulsar_source [--records 100000] [--rounds 2]
"""

from __future__ import annotations

import argparse
import json
import time
import uuid

from consumers import MessageLike
from consumers.backends.pulsar.client import PulsarSettings
from consumers.backends.pulsar.consumer import PulsarConsumer
from consumers.dev.embedded.pulsar import start_pulsar_lite
from consumers.dev.sample import produce_pulsar_sample

KEYS = 1_000
#: Acknowledged as the engine commits: every this many records, one position.
COMMIT_EVERY = 1_000


def measure(url: str, records: int) -> dict[str, float]:
    """Consume ``records`` fresh messages, then acknowledge them; µs a message of each."""
    topic = f"bench-source-{uuid.uuid4().hex[:8]}"
    produce_pulsar_sample(url, topic, records, KEYS)
    consumer = PulsarConsumer(PulsarSettings(url, f"{topic}-group"), lambda error: None)
    consumer.subscribe([topic])
    try:
        got: list[MessageLike] = []
        consume_s = 0.0
        while len(got) < records:
            started = time.thread_time()
            got.extend(consumer.consume(5000, 0.5))
            consume_s += time.thread_time() - started
        name = str(got[0].topic())  # the engine's name for it: the broker's full topic name
        started = time.thread_time()
        for position in range(COMMIT_EVERY, records + 1, COMMIT_EVERY):
            consumer.commit([(name, 0, position, "")], False)
        ack_s = time.thread_time() - started
    finally:
        consumer.close()
    return {
        "consume_us": round(consume_s / records * 1e6, 2),
        "acknowledge_us": round(ack_s / records * 1e6, 2),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--records", type=int, default=100_000)
    parser.add_argument("--rounds", type=int, default=2)
    args = parser.parse_args()
    broker = start_pulsar_lite()
    try:
        for _ in range(args.rounds):
            print(json.dumps(measure(broker.url, args.records)), flush=True)
    finally:
        broker.stop()


if __name__ == "__main__":
    main()
