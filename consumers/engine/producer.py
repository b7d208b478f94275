"""Producing outputs and dead letters from the event loop, with acknowledgements back on it.

    send(topic, key, value, headers, on_done) ── loop thread, never blocks
        └─ client.produce(...)                   librdkafka queues it
    poll thread: client.poll() → delivery callback → loop.call_soon_threadsafe(on_done, error)

A record's offset may be committed only after its outputs or dead letter are acknowledged, so
``on_done`` is where the engine completes it. When the client's local queue is full, ``send``
retries shortly on the loop instead of blocking it. A failure reaches ``on_done`` as a
:class:`DeliveryError` (the client's ``delivery_error``) that says whether sending the record
again can succeed.
"""

from __future__ import annotations

import asyncio
import logging
import threading
from collections import deque
from collections.abc import Callable

from consumers.backends.base import ProducerFactory
from consumers.errors import DeliveryError

log = logging.getLogger("lanehouse.producer")

Done = Callable[[DeliveryError | None], None]
Headers = list[tuple[str, bytes]] | None
#: Seconds before records refused for a full client queue are handed over again.
BACKLOG_RETRY_SECONDS = 0.005


class AckedProducer:
    """One client plus the thread that serves its delivery callbacks."""

    def __init__(
        self, name: str, factory: ProducerFactory, loop: asyncio.AbstractEventLoop
    ) -> None:
        self._name = name
        self._client = factory()
        self._loop = loop
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._serve, name=f"lh-producer-{name}", daemon=True)
        self._thread.start()
        self._backlog: deque[tuple[str, bytes | None, bytes | None, Headers, Done]] = deque()
        self._closed = False
        #: Sent and not yet acknowledged or failed, backlog included.
        self.in_flight = 0

    def send(
        self,
        topic: str,
        key: bytes | None,
        value: bytes | None,
        headers: list[tuple[str, bytes]] | None,
        on_done: Done,
    ) -> None:
        """Queue one record; ``on_done(None)`` or ``on_done(error)`` later runs on the loop.

        Records reach the client in the order they were sent: while the client's queue is full
        (``BufferError``) later sends wait behind the refused one in ``_backlog``, and they count
        in ``in_flight`` from the start, so a drain or revoke waiting for it waits for them too.
        A send the client refuses outright (too large, bad type) fails through ``on_done``.
        """
        self.in_flight += 1
        self._backlog.append((topic, key, value, headers, on_done))
        if len(self._backlog) == 1:
            self._hand_over()

    def _hand_over(self) -> None:
        backlog, loop, explain = self._backlog, self._loop, self._client.delivery_error
        while backlog:
            topic, key, value, headers, on_done = backlog[0]
            if self._closed:
                backlog.popleft()
                self._finish(on_done, DeliveryError("the producer is closed", permanent=False))
                continue

            def delivered(err: object, _msg: object, on_done: Done = on_done) -> None:
                failure = None if err is None else explain(err)
                loop.call_soon_threadsafe(self._finish, on_done, failure)

            try:
                self._client.produce(topic, value, key, headers=headers, on_delivery=delivered)
            except BufferError:
                loop.call_later(BACKLOG_RETRY_SECONDS, self._hand_over)
                return
            except Exception as exc:  # refused outright (too large, bad type...)
                loop.call_soon(self._finish, on_done, explain(exc))
            backlog.popleft()

    def _finish(self, on_done: Done, error: DeliveryError | None) -> None:
        self.in_flight -= 1
        on_done(error)

    def _serve(self) -> None:
        while not self._stop.is_set():
            self._client.poll(0.05)

    def close(self, timeout: float = 10.0) -> None:
        """Wait for outstanding deliveries (their callbacks still reach the loop), then stop."""
        self._closed = True
        remaining = self._client.flush(timeout)
        if remaining:
            log.warning("producer %s: %d records unacknowledged at close", self._name, remaining)
        self._stop.set()
        self._thread.join(timeout=5)
        self._client.close()
