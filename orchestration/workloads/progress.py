"""A workload's figures as ``lanehouse workloads`` shows them: the newest runs' reports added
up, or, when no replica runs, the broker's lag read now (:mod:`orchestration.workloads.standstill`).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from datetime import UTC, datetime
from typing import Any, TypeVar

from dagster import DagsterInstance
from pydantic import BaseModel, ConfigDict

from consumers import WorkloadSpec
from orchestration.workloads.health import newest_reports

__all__ = ["TopicProgress", "reported_progress", "still_progress"]

_N = TypeVar("_N", int, float)


class TopicProgress(BaseModel):
    """The engine's last report on the workload's topics (``AssetObservation`` metadata of its
    asset, ``workloads/<name>``), or the broker's figures of a workload no replica runs."""

    model_config = ConfigDict(frozen=True)

    topic: str
    observed_at: datetime
    age_seconds: float
    status: str | None
    throughput_per_s: float | None
    lag: int | None
    in_flight: int | None
    records_completed: int | None
    records_failed: int | None
    pinned_partition: int | None
    pinned_offset: int | None
    pinned_seconds: float | None
    #: ``run``: the newest run's report; ``broker``: no replica runs, so the figures are the
    #: group's committed offsets against the log end, read now (``lag_unknown`` says why not).
    lag_from: str = "run"
    lag_unknown: str | None = None


def reported_progress(
    instance: DagsterInstance, spec: WorkloadSpec, run_ids: list[str], now: datetime
) -> TopicProgress | None:
    """The last report on the workload's asset of each of ``run_ids`` (the live replicas), added
    up: each replica reports its own partitions, so rates, lag and counts sum; the pin is the
    oldest."""
    topic = ", ".join(spec.source.topics)
    newest = newest_reports(instance, spec.name, run_ids)
    if not newest:
        return None
    reports = [meta for _, meta in newest.values()]
    at = datetime.fromtimestamp(max(stamp for stamp, _ in newest.values()), tz=UTC)
    pins = [m for m in reports if _number(m.get("pinned_seconds")) is not None]
    pin = max(pins, key=lambda m: _number(m.get("pinned_seconds")) or 0.0) if pins else {}
    return TopicProgress(
        topic=topic,
        observed_at=at,
        age_seconds=max((now - at).total_seconds(), 0.0),
        status=_text(reports[0].get("status")),
        throughput_per_s=_total(reports, "throughput_per_s", _number),
        lag=_total(reports, "lag", _integer),
        in_flight=_total(reports, "in_flight", _integer),
        records_completed=_total(reports, "records_completed", _integer),
        records_failed=_total(reports, "records_failed", _integer),
        pinned_partition=_integer(pin.get("pinned_partition")),
        pinned_offset=_integer(pin.get("pinned_offset")),
        pinned_seconds=_number(pin.get("pinned_seconds")),
    )


def still_progress(figures: Mapping[str, Any], now: datetime) -> TopicProgress:
    """A still workload's figures (:func:`~orchestration.workloads.standstill.standstill_figures`),
    read from the broker now: no rate, nothing in flight."""
    return TopicProgress(
        topic=str(figures["topics"]),
        observed_at=now,
        age_seconds=0.0,
        status=_text(figures["status"]),
        throughput_per_s=None,
        lag=_integer(figures["lag"]),
        in_flight=0,
        records_completed=None,
        records_failed=None,
        pinned_partition=None,
        pinned_offset=None,
        pinned_seconds=None,
        lag_from="broker",
        lag_unknown=_text(figures.get("lag_unknown")),
    )


def _total(
    reports: Sequence[Mapping[str, object]], field: str, read: Callable[[object], _N | None]
) -> _N | None:
    values = [value for m in reports if (value := read(m.get(field))) is not None]
    return sum(values[1:], values[0]) if values else None


def _text(value: object) -> str | None:
    return value if isinstance(value, str) else None


def _number(value: object) -> float | None:
    return float(value) if isinstance(value, int | float) else None


def _integer(value: object) -> int | None:
    return int(value) if isinstance(value, int | float) else None
