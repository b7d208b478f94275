"""``consumers/errors.py``: one tree under ``LanehouseError`` holding every exception class the
packages define, drawn truly in the module's docstring, and the context errors carry."""

from __future__ import annotations

import importlib
import pickle
import pkgutil
import re

import pytest

import consumers
from consumers import (
    BrokerError,
    DeliveryError,
    HandlerError,
    LanehouseError,
    PlaceError,
    RemoteError,
    SinkWriteError,
    TopicMissing,
    WorkerDied,
    errors,
)

pytestmark = pytest.mark.unit


def _defined_exceptions() -> dict[str, type[BaseException]]:
    found: dict[str, type[BaseException]] = {}
    for info in pkgutil.walk_packages(consumers.__path__, "consumers."):
        module = importlib.import_module(info.name)
        for value in vars(module).values():
            if (
                isinstance(value, type)
                and issubclass(value, BaseException)
                and value.__module__ == module.__name__
            ):
                found[f"{module.__name__}.{value.__qualname__}"] = value
    return found


def test_every_exception_class_of_the_engine_is_in_the_tree() -> None:
    found = _defined_exceptions()
    assert "consumers.errors.BrokerError" in found  # the walk imported the modules
    assert (
        sorted(name for name, kind in found.items() if not issubclass(kind, LanehouseError)) == []
    )


def test_public_exception_classes_live_in_errors_py() -> None:
    public = [
        name
        for name in _defined_exceptions()
        if not name.startswith("consumers.errors.") and not name.rsplit(".", 1)[1].startswith("_")
    ]
    assert public == []


def _drawing() -> list[tuple[int, str]]:
    """``(depth, class name)`` for each line of the docstring's tree."""
    lines = []
    for line in (errors.__doc__ or "").splitlines():
        match = re.match(r"^    ((?:│   |    )*)(?:├── |└── )?([A-Z]\w+)\b", line)
        if match and (match[2] == "LanehouseError" or "── " in line):
            depth = len(match[1]) // 4 + (1 if "── " in line else 0)
            lines.append((depth, match[2]))
    return lines


def test_the_docstring_draws_the_tree_as_the_classes_are() -> None:
    drawn = _drawing()
    assert drawn[0] == (0, "LanehouseError")
    classes = {
        name
        for name, value in vars(errors).items()
        if isinstance(value, type) and issubclass(value, LanehouseError)
    }
    # PlaceError is the fields' base, not a kind of failure: it is not drawn.
    assert sorted(name for _, name in drawn) == sorted(classes - {"PlaceError"})
    parents: list[str] = []
    for depth, name in drawn:
        parents[depth:] = [name]
        if depth:
            assert parents[depth - 1] in {c.__name__ for c in getattr(errors, name).__mro__[1:]}, (
                f"{name} is drawn under {parents[depth - 1]}"
            )


def test_context_names_the_place_and_whether_running_again_helps() -> None:
    error = BrokerError("commit failed", workload="orders", topic="t", partition=0, offset=12)
    assert (error.workload, error.topic, error.partition, error.offset) == ("orders", "t", 0, 12)
    assert error.context() == "workload orders · topic t[0]@12"
    assert str(error) == "commit failed"
    assert TopicMissing("gone", topic="t").context() == "topic t · running again will not help"
    assert BrokerError("x", retriable=True).context() == "running again can help"
    assert LanehouseError("plain").context() == ""
    sink = SinkWriteError("orders", "output", "out", ("in", 2, 7), "too large")
    assert isinstance(sink, PlaceError)
    assert sink.context() == "workload orders · topic in[2]@7"


@pytest.mark.parametrize(
    "error",
    [
        RemoteError("ZeroDivisionError", "division by zero"),
        SinkWriteError("orders", "dead letter", "dlq", ("in", 2, 7), "too large"),
        HandlerError("orders", "in", 1, 5, b"k", "RuntimeError: boom"),
        BrokerError("commit failed", workload="orders", topic="t", partition=0, retriable=True),
        DeliveryError("refused", permanent=True),
        WorkerDied("exit -9"),
    ],
    ids=lambda e: type(e).__name__,
)
def test_errors_cross_a_process_boundary_whole(error: LanehouseError) -> None:
    """A worker process sends errors back pickled: one that cannot be rebuilt from its pickle
    (``RemoteError`` took two arguments, ``args`` holds one) would stall its partition."""
    back = pickle.loads(pickle.dumps(error))
    assert type(back) is type(error)
    assert (str(back), back.context(), vars(back)) == (str(error), error.context(), vars(error))
