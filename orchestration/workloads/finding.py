"""Finding one workload's spec for a job that serves it (consume, replay, rewind): the file
that declares the name, validated and with its handler imported, or a ``Failure`` naming file
and field."""

from __future__ import annotations

from pathlib import Path

from dagster import Failure

from consumers import SpecError, WorkloadSpec, load_spec
from consumers.config.loading import read_yaml_mapping, spec_files


def find_workload(
    directory: Path, name: str, *, disabled_too: bool = False
) -> tuple[Path, WorkloadSpec]:
    """The enabled (or, with ``disabled_too``, any) spec named ``name`` in ``directory``,
    handler imported.

    Raises ``Failure`` naming the file and field. A broken spec of *another* workload does not
    stop this one: one bad file must not take every consumer run down.
    """
    if not directory.is_dir():
        raise _failure(f"workloads directory {directory} does not exist (LANEHOUSE_WORKLOADS)")
    matches: list[tuple[Path, WorkloadSpec]] = []
    broken: list[SpecError] = []
    for path in spec_files([directory]):
        try:
            spec = load_spec(path, import_handler=False)
        except SpecError as exc:
            if _declared_name(path) == name:
                raise _failure(f"workload {name!r}: {exc}", exc) from exc
            broken.append(exc)
            continue
        if spec.name == name:
            matches.append((path, spec))
    if not matches:
        detail = "".join(f"; unreadable: {exc}" for exc in broken)
        raise _failure(f"no workload named {name!r} in {directory}{detail}")
    if len(matches) > 1:
        files = " and ".join(str(path) for path, _ in matches)
        raise _failure(f"workload {name!r} is declared twice (field name): {files}")
    path, spec = matches[0]
    if not spec.enabled and not disabled_too:
        error = SpecError(str(path), "enabled", f"workload {name!r} is disabled (enabled: false)")
        raise _failure(str(error), error)
    try:
        return path, load_spec(path)  # now with the handler and interceptors imported
    except SpecError as exc:
        raise _failure(f"workload {name!r}: {exc}", exc) from exc


def _declared_name(path: Path) -> object:
    """The raw ``name:`` of a file that failed validation (it may still be the one asked for)."""
    try:
        return read_yaml_mapping(path).get("name")
    except SpecError:
        return None


def _failure(description: str, error: SpecError | None = None) -> Failure:
    """No retry: a spec problem stays until someone edits the file."""
    metadata = {"file": error.file, "field": error.field} if error is not None else {}
    return Failure(description=description, metadata=metadata, allow_retries=False)
