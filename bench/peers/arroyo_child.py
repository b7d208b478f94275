"""Bench peer: consume the sample topic with Sentry Arroyo, print one ``bench/check.py`` line.

    <.bench-venvs/arroyo>/bin/python bench/peers/arroyo_child.py --broker H:P --topic T \
        --group G --records N --keys K --kind {noop,json,sleep} --concurrency C \
        --timeout S

Runs in its own venv (``bench/peers/venvs.py``: arroyo needs confluent-kafka >=2.13.2, which
conflicts with Quix Streams' pin), so it imports only the standard library, arroyo and
``bench/check.py``. A ``StreamProcessor`` runs in the main thread over a ``KafkaConsumer``.

- noop/json: ``RunTask(fn, CommitOffsets(commit))``, synchronous in the poll loop, no threads.
- cpu: ``RunTaskWithMultiprocessing(burn_message, RunTask(check), ...)`` with a
  ``MultiprocessingPool`` of C processes (spawned), batches of up to 100 messages or 50 ms
  (about 20 ms of work a batch: enough to amortise the shared-memory hand-off, short enough to
  keep both processes fed), default block sizes (records are ~100 bytes). The begin/end check
  runs in the parent as results come back, which Arroyo keeps in arrival order.
- sleep: ``RunTaskInThreads(fn, concurrency=C, max_pending_futures=2*C, CommitOffsets(...))``,
  Arroyo's way to overlap blocking I/O. ``Check.begin``/``end`` are not thread-safe, so the
  worker takes one ``threading.Lock`` for ``begin`` and again for ``end`` (the 20 ms sleep is
  outside it): a small cost Lanehouse's single-threaded handlers do not pay. Arroyo does not
  keep a key's records apart, so two records of one key may run at once: the check counts
  that as an order violation, and it is reported, not an error of this script.

Commits: explicit mode (``enable_auto_commit=False``, so Arroyo itself commits synchronously,
rather than leaving it to librdkafka's auto-commit of stored offsets) with the default
``ONCE_PER_SECOND`` policy. When ``records`` are done the handler calls
``processor.signal_shutdown()``; the processor then closes its strategy, whose ``join`` forwards
every finished message and makes ``CommitOffsets.join`` commit with ``force=True`` (not
throttled) before the consumer closes, so every handled record is committed. A timer signals
shutdown at ``--timeout``.
"""

from __future__ import annotations

import json
import logging
import sys
import threading
import time
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from arroyo.backends.kafka import KafkaConsumer, KafkaPayload
from arroyo.backends.kafka.configuration import build_kafka_consumer_configuration
from arroyo.commit import ONCE_PER_SECOND
from arroyo.processing import StreamProcessor
from arroyo.processing.strategies import (
    CommitOffsets,
    ProcessingStrategy,
    ProcessingStrategyFactory,
    RunTask,
    RunTaskInThreads,
)
from arroyo.processing.strategies.run_task_with_multiprocessing import (
    MultiprocessingPool,
    RunTaskWithMultiprocessing,
)
from arroyo.types import Commit, Message, Partition, Topic
from check import Check, burn, seq_of
from common import CLIENT, SLEEP, parse_args, run_and_report

Handler = Callable[[Message[KafkaPayload]], None]


def make_handler(kind: str, check: Check, finish: Callable[[], None]) -> Handler:
    begin, end = check.begin, check.end

    def noop(msg: Message[KafkaPayload]) -> None:
        payload, where = msg.payload, msg.value
        begin(payload.key, seq_of(payload.value))
        end(payload.key, where.partition.index, where.offset)
        finish()

    def transform(msg: Message[KafkaPayload]) -> None:
        payload, where = msg.payload, msg.value
        data = json.loads(payload.value)
        check.sink = {"key": data["key"].upper(), "seq": data["seq"] + 1}
        begin(payload.key, int(data["seq"]))
        end(payload.key, where.partition.index, where.offset)
        finish()

    lock = threading.Lock()

    def sleep(msg: Message[KafkaPayload]) -> None:  # in a RunTaskInThreads worker
        payload, where = msg.payload, msg.value
        with lock:
            begin(payload.key, seq_of(payload.value))
        time.sleep(SLEEP)
        with lock:
            end(payload.key, where.partition.index, where.offset)
        finish()

    def checked(msg: Message[Any]) -> None:  # cpu: burn_message's result, in arrival order
        key, seq = msg.payload
        where = msg.value
        begin(key, seq)
        end(key, where.partition.index, where.offset)
        finish()

    return {"noop": noop, "json": transform, "sleep": sleep, "cpu": checked}[kind]


def burn_message(msg: Message[KafkaPayload]) -> tuple[bytes, int]:
    """In an Arroyo worker process (module-level, so spawn can import it): what the check in
    the parent needs comes back as the result."""
    burn(msg.payload.value)
    return msg.payload.key, seq_of(msg.payload.value)


class Factory(ProcessingStrategyFactory[KafkaPayload]):
    def __init__(self, handler: Handler, threads: int, processes: int = 0) -> None:
        self.handler, self.threads, self.processes = handler, threads, processes
        self.pool = MultiprocessingPool(processes) if processes else None

    def create_with_partitions(
        self, commit: Commit, partitions: Mapping[Partition, int]
    ) -> ProcessingStrategy[KafkaPayload]:
        if self.pool is not None:
            handler = self.handler

            def checked(msg: Message[Any]) -> None:  # the parent, in arrival order
                handler(msg)

            return RunTaskWithMultiprocessing(
                burn_message,
                RunTask(checked, CommitOffsets(commit)),
                max_batch_size=100,
                max_batch_time=0.05,
                pool=self.pool,
            )
        if self.threads:
            return RunTaskInThreads(
                self.handler,
                concurrency=self.threads,
                max_pending_futures=2 * self.threads,
                next_step=CommitOffsets(commit),
            )
        return RunTask(self.handler, CommitOffsets(commit))


def main() -> int:
    args = parse_args(__doc__.splitlines()[0])
    logging.basicConfig(stream=sys.stderr, level=logging.WARNING)
    check = Check(args.records, args.keys)
    processor: StreamProcessor[KafkaPayload] | None = None
    records = args.records

    def finish() -> None:
        if check.done >= records and processor is not None:
            processor.signal_shutdown()  # only sets a flag: safe from a worker thread

    config: dict[str, Any] = build_kafka_consumer_configuration(
        {**CLIENT, "bootstrap.servers": args.broker},
        group_id=args.group,
        auto_offset_reset="earliest",
        enable_auto_commit=False,
    )
    threads = args.concurrency if args.kind == "sleep" else 0
    processes = args.concurrency if args.kind == "cpu" else 0
    factory = Factory(make_handler(args.kind, check, finish), threads, processes)
    processor = StreamProcessor(
        KafkaConsumer(config),
        Topic(args.topic),
        factory,
        commit_policy=ONCE_PER_SECOND,
    )
    try:
        return run_and_report(processor.run, processor.signal_shutdown, args.timeout, check)
    finally:
        if factory.pool is not None:
            factory.pool.close()


if __name__ == "__main__":
    sys.exit(main())
