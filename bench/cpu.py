"""The CPU-bound bench handler, in a module of its own so worker processes import it by name
(``bench.engine`` runs as ``__main__`` in its children)."""

from __future__ import annotations

from bench import check
from consumers import Record


def burn_record(rec: Record) -> None:
    """About 200 µs of pure Python on the record's value (``bench.check.BURN_US``)."""
    check.burn(rec.value or b"")
