"""Bench peer: consume the sample topic with Quix Streams, print one ``bench/check.py`` line.

    <.bench-venvs/quix>/bin/python bench/peers/quix_child.py --broker H:P --topic T --group G \
        --records N --keys K --kind {noop,json,sleep} --concurrency C --timeout S

Runs in its own venv (``bench/peers/venvs.py``: quixstreams pins confluent-kafka <2.13, which
conflicts with Arroyo's), so it imports only the standard library, quixstreams and
``bench/check.py``. Quix Streams handles one message at a time in its poll loop, so
``--concurrency`` is accepted for the common protocol and ignored.

The handler is an ``sdf.update(..., metadata=True)`` callback (``value, key, timestamp,
headers``); partition and offset come from ``quixstreams.message_context()``. It does exactly
what ``bench/engine.py`` ``make_handler`` does per record. When ``records`` are done it calls
``app.stop()``: Quix stores the current message's offset after the callback, then leaves its
loop and commits its checkpoint (``commit_checkpoint(force=True)``, a synchronous commit)
before the consumer closes, so every handled record is committed. A timer stops the app at
``--timeout``. ``state_dir`` is a temporary directory (nothing written into the repo), changelog
topics are off (the app is stateless), and ``auto_create_topics`` is off: the topic exists.
"""

from __future__ import annotations

import json
import logging
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from check import Check, burn, seq_of
from common import CLIENT, SLEEP, parse_args, run_and_report
from quixstreams import Application, message_context


def main() -> int:
    args = parse_args(__doc__.splitlines()[0])
    logging.basicConfig(stream=sys.stderr, level=logging.WARNING)
    check = Check(args.records, args.keys)
    begin, end, records = check.begin, check.end, args.records

    with tempfile.TemporaryDirectory(prefix="quix-state-") as state_dir:
        app = Application(
            broker_address=args.broker,
            consumer_group=args.group,
            auto_offset_reset="earliest",
            consumer_extra_config=dict(CLIENT),
            state_dir=state_dir,
            auto_create_topics=False,
            use_changelog_topics=False,
            loglevel="WARNING",
        )

        def finish() -> None:
            if check.done >= records:
                app.stop()

        def noop(value: bytes, key: bytes, _ts: int, _headers: object) -> None:
            ctx = message_context()
            begin(key, seq_of(value))
            end(key, ctx.partition, ctx.offset)
            finish()

        def transform(value: bytes, key: bytes, _ts: int, _headers: object) -> None:
            ctx = message_context()
            data = json.loads(value)
            check.sink = {"key": data["key"].upper(), "seq": data["seq"] + 1}
            begin(key, int(data["seq"]))
            end(key, ctx.partition, ctx.offset)
            finish()

        def sleep(value: bytes, key: bytes, _ts: int, _headers: object) -> None:
            ctx = message_context()
            begin(key, seq_of(value))
            time.sleep(SLEEP)
            end(key, ctx.partition, ctx.offset)
            finish()

        def cpu(value: bytes, key: bytes, _ts: int, _headers: object) -> None:
            ctx = message_context()
            begin(key, seq_of(value))
            burn(value)
            end(key, ctx.partition, ctx.offset)
            finish()

        handler = {"noop": noop, "json": transform, "sleep": sleep, "cpu": cpu}[args.kind]
        topic = app.topic(args.topic, key_deserializer="bytes", value_deserializer="bytes")
        app.dataframe(topic).update(handler, metadata=True)

        return run_and_report(app.run, app.stop, args.timeout, check)


if __name__ == "__main__":
    sys.exit(main())
