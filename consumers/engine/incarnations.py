"""Which incarnation of each assigned topic a workload reads, and a watch for topics deleted or
recreated under it.

A topic deleted and created again under its name is a new log: its offsets start again at 0.
The client does not follow it (librdkafka keeps the old topic's state: it stops receiving, and
on some brokers crashes), and a commit by topic name made after the recreation lands on the new
topic, where the next run would skip every record below it. So the source learns each topic's
id when it is assigned, checks the ids every :data:`CHECK_SECONDS` on a thread of its own, and
again right before every commit that ends an assignment (revoke, shutdown). A topic whose id
changed or vanished is *fenced*: no position of it is committed again, and the workload stops
with :class:`~consumers.errors.TopicReplaced` so it starts again on the topic as it is now
(under Dagster the discovery sensor restarts the run).

A periodic commit made between a recreation and the next check can still land on the new
topic; the check's interval bounds that window (docs/reliability.md).
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Iterable

from consumers.backends.base import Identify
from consumers.errors import BrokerError, TopicMissing, TopicReplaced

log = logging.getLogger("lanehouse.incarnations")

#: How often the watch asks the broker for the assigned topics' ids.
CHECK_SECONDS = 5.0


class IncarnationWatch:
    """Topic ids as they were at assignment, compared with the broker's on a timer."""

    def __init__(self, name: str, identify: Identify, interval: float = CHECK_SECONDS) -> None:
        self._name = name
        self._identify = identify
        self._interval = interval
        self._lock = threading.Lock()
        #: Topic -> its id when it was assigned (topics whose broker has no ids are left out).
        self._ids: dict[str, str] = {}
        #: Fenced topics -> why; read by the source thread between polls.
        self.replaced: dict[str, str] = {}
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name=f"lh-topics-{name}", daemon=True)

    def start(self) -> None:
        self._thread.start()

    def close(self) -> None:
        self._stop.set()

    def learn(self, topics: Iterable[str]) -> None:
        """Remember the current ids of newly assigned ``topics`` (blocking: a broker call)."""
        with self._lock:
            wanted = sorted(set(topics) - set(self._ids) - set(self.replaced))
        if not wanted:
            return
        try:
            found = self._identify(wanted)
        except BrokerError as exc:  # the watch cannot start for them now; the next assignment will
            log.warning("workload %s: cannot read topic ids of %s: %s", self._name, wanted, exc)
            return
        with self._lock:
            for topic, identity in found.items():
                if identity.topic_id:
                    self._ids[topic] = identity.topic_id

    def check(self, topics: Iterable[str] | None = None) -> dict[str, str]:
        """Compare ``topics`` (default: every known one) with the broker now; fence and return
        the ones replaced since they were learned. A broker that does not answer fences nothing."""
        with self._lock:
            names = list(self._ids) if topics is None else topics
            known = {t: self._ids[t] for t in names if t in self._ids}
        if not known:
            return {}
        found: dict[str, str] = {}
        try:  # one broker call for all of them; one each only when some topic is missing
            current = {t: i.topic_id for t, i in self._identify(sorted(known)).items()}
        except TopicMissing:
            current = {}
            for topic in sorted(known):
                try:
                    current[topic] = self._identify([topic])[topic].topic_id
                except TopicMissing:
                    found[topic] = f"topic {topic!r} was deleted (id {known[topic]})"
                except BrokerError as exc:
                    log.debug("workload %s: topic id check skipped: %s", self._name, exc)
        except BrokerError as exc:
            log.debug("workload %s: topic id check skipped: %s", self._name, exc)
            current = {}
        for topic, now in current.items():
            old = known[topic]
            if now != old:
                found[topic] = f"topic {topic!r} was recreated (id {old} -> {now})"
        if found:
            with self._lock:
                for topic, reason in found.items():
                    if topic not in self.replaced:
                        log.error(
                            "workload %s: %s under the running workload: its positions belong "
                            "to the old log and are not committed; the workload stops to start "
                            "again on the topic as it is now",
                            self._name,
                            reason,
                        )
                    self.replaced[topic] = reason
                    self._ids.pop(topic, None)
        return found

    def fenced(self, topic: str) -> bool:
        return topic in self.replaced

    def error(self) -> TopicReplaced:
        return TopicReplaced(
            f"workload {self._name}: " + "; ".join(self.replaced.values()), workload=self._name
        )

    def _run(self) -> None:
        while not self._stop.wait(self._interval):
            try:
                self.check()
            except Exception:  # the watch must never die silently; the next round tries again
                log.exception("workload %s: topic id check failed", self._name)
