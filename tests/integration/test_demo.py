"""`make demo` (the README's main command) stays true: it runs, its checks pass, and they can fail."""

from __future__ import annotations

import io

import pulsar
import pytest
from rich.console import Console

from consumers.embedded.pulsar import PULSAR_TEST_CLIENT_KWARGS, PulsarLiteBroker
from orchestration.demo import Outcome, Watched, _print_summary, pulsar_unacknowledged, run_demo
from tests.backends import PulsarBackend

pytestmark = pytest.mark.integration


def test_demo_runs_and_verifies_itself() -> None:
    out = io.StringIO()
    ok = run_demo(
        records=3000,
        keys=50,
        partitions=2,
        orders=2000,
        customers=40,
        console=Console(file=out, width=200),
    )
    text = out.getvalue()
    assert ok, text
    assert "clickstream (Kafka)" in text and "orders (Pulsar)" in text
    assert "3,000 / 3,000 (offsets)" in text and "2,000 / 2,000 (acknowledged)" in text
    assert "persistent://public/default/orders" in text
    assert "NO" not in text


def outcome(**changes: object) -> Outcome:
    fields: dict[str, object] = {
        "label": "w (Kafka)",
        "topic": "t",
        "produced": 10,
        "handled": 10,
        "keys": 2,
        "violations": 0,
        "committed": "10 / 10",
        "committed_all": True,
        "watched": Watched(pool="default", peak_permits=3),
        **changes,
    }
    return Outcome(**fields)  # type: ignore[arg-type]


@pytest.mark.parametrize(
    "bad",
    [
        {"handled": 9},
        {"violations": 1},
        {"committed_all": False},
        {"watched": Watched(pool="other", peak_permits=3)},
        {"watched": Watched(pool=None)},
    ],
    ids=str,
)
def test_summary_fails_when_one_workload_misses_one_check(bad: dict[str, object]) -> None:
    out = io.StringIO()
    console = Console(file=out, width=200)
    assert _print_summary([outcome(), outcome(label="v (Pulsar)")], console)
    assert not _print_summary([outcome(), outcome(label="v (Pulsar)", **bad)], console)
    assert "NO" in out.getvalue()


def test_pulsar_unacknowledged_counts_what_the_subscription_left(
    pulsar_broker: PulsarLiteBroker,
) -> None:
    backend = PulsarBackend(pulsar_broker)  # unbatched: each message is acknowledged alone
    topic = backend.make_topic(1)
    backend.produce(topic, [(b"k", str(i).encode()) for i in range(10)])
    url = pulsar_broker.url
    assert pulsar_unacknowledged(url, topic, "sub") == 10  # a new subscription starts earliest

    def acknowledge(below: int) -> None:
        client = pulsar.Client(url, **PULSAR_TEST_CLIENT_KWARGS)
        try:
            consumer = client.subscribe(topic, "sub", consumer_type=pulsar.ConsumerType.Shared)
            for _ in range(10 - len(acked)):
                msg = consumer.receive(5000)
                if int(msg.data()) < below:
                    consumer.acknowledge(msg)
                    acked.add(int(msg.data()))
            consumer.close()
        finally:
            client.close()

    acked: set[int] = set()
    acknowledge(below=6)
    assert pulsar_unacknowledged(url, topic, "sub") == 4
    assert pulsar_unacknowledged(url, topic, "sub") == 4  # it acknowledges only its marker
    acknowledge(below=10)
    assert pulsar_unacknowledged(url, topic, "sub") == 0
