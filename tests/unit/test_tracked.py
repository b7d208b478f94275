"""A record's engine state changes only through its own interface: ``TrackedRecord``'s methods,
the offset tracker's ``done`` flag, and ``attempts`` counted by the record itself (a worker
process copies it). And ``TrackedRecord`` sets every field a ``Record`` has."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

from consumers import OutputRecord, Record
from consumers.engine.partition import PartitionState
from consumers.engine.tracked import TrackedRecord

pytestmark = pytest.mark.unit

PACKAGE = Path(__file__).resolve().parents[2] / "consumers"

#: Attribute -> the only modules that may assign it on something other than ``self``.
WRITERS = {
    "done": {"consumers/engine/tracker.py"},
    "attempts": {"consumers/execution/process_worker.py"},  # its copy in the worker process
    "part": set(),
    "_acks": set(),
    "_emitted": set(),
    "_outputs": set(),
}


def test_a_tracked_record_sets_every_field_of_a_record() -> None:
    args = ("t", 3, 7, b"k", b"v", [("h", b"x")], 1_234)
    plain, tracked = Record(*args), TrackedRecord(*args, PartitionState("t", 3))
    assert set(Record.__slots__) == {"attempts", *Record.__init__.__code__.co_varnames[1:8]}
    assert {name: getattr(tracked, name) for name in Record.__slots__} == {
        name: getattr(plain, name) for name in Record.__slots__
    }


def test_engine_state_of_a_record_is_written_only_by_its_owners() -> None:
    found = []
    for path in sorted(PACKAGE.rglob("*.py")):
        where = path.relative_to(PACKAGE.parent).as_posix()
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.Assign):
                targets = node.targets
            elif isinstance(node, ast.AugAssign | ast.AnnAssign):
                targets = [node.target]
            else:
                continue
            for target in targets:
                if (
                    isinstance(target, ast.Attribute)
                    and target.attr in WRITERS
                    and not (isinstance(target.value, ast.Name) and target.value.id == "self")
                    and where not in WRITERS[target.attr]
                ):
                    found.append(f"{where}:{node.lineno} assigns .{target.attr}")
    assert found == []


def test_a_record_settles_once_its_outputs_and_its_dead_letter_are_acknowledged() -> None:
    rec = TrackedRecord("t", 0, 0, None, b"", None, 0, PartitionState("t", 0))
    assert rec.failed_attempt() == 1 and rec.attempts == 1
    rec.awaiting()  # a dead letter in flight
    rec.resolved([OutputRecord(b"a"), OutputRecord(b"b")])
    assert rec.emittable and rec.unacknowledged
    assert not rec.acked()  # the dead letter: its outputs have not even been sent
    assert [o.value for o in rec.emitting()] == [b"a", b"b"]
    assert not rec.acked() and rec.acked()  # the second output's acknowledgement settles it
    assert not rec.unacknowledged


def test_a_record_without_outputs_settles_at_its_last_acknowledgement() -> None:
    rec = TrackedRecord("t", 0, 0, None, b"", None, 0, PartitionState("t", 0))
    rec.awaiting()  # a landed row
    assert rec.acked()
