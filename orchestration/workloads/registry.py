"""The workload registry: every spec file in the workloads directory, read and validated.

The discovery sensor reads it on every tick. Unlike :func:`consumers.config.spec.load_specs`, one bad
file never hides the others: each invalid file is reported as an :class:`InvalidSpec` (file,
field, reason) and every valid file is kept.

* **Handlers are not imported.** Importing user modules in the sensor's process on every tick is
  slow and lets a broken handler module break discovery for every workload. The run imports its
  handler and fails with the :class:`~consumers.errors.SpecError` if it cannot.
* **A name declared by two files** makes both files invalid (field ``name``) and neither is
  registered: picking one by file order would let a copied file silently replace a running
  workload's spec. The sensor holds such a workload as it is until one file is renamed.
* **One topic landed into one dataset by two enabled workloads** (of one cluster) makes both
  files invalid (field ``landing``; :mod:`consumers.config.overlaps` has the rule), unless both
  opt in: a copied file would land every record a second time. A running one is held like a
  name declared twice; neither is started until one file changes.
* **Cheap:** a :class:`SpecCache` remembers each file's outcome by its ``stat`` identity (mtime in
  ns, size, inode), the platform config file's (the clusters a spec names live there) and the
  environment it was interpolated with, so an unchanged directory costs one ``stat`` per file.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path

from consumers import SpecError, WorkloadSpec, load_spec
from consumers.config.loading import read_yaml_mapping, spec_files
from consumers.config.overlaps import LandingOverlap, landing_overlaps, reasons_by_file
from consumers.config.platform import config_path
from consumers.config.spec import spec_hash

__all__ = ["InvalidSpec", "RegisteredWorkload", "Registry", "SpecCache", "read_registry"]


@dataclass(frozen=True)
class RegisteredWorkload:
    """A valid spec: the validated model, its hash and the file it came from."""

    spec: WorkloadSpec
    hash: str
    file: str

    @property
    def name(self) -> str:
        return self.spec.name

    @property
    def enabled(self) -> bool:
        return self.spec.enabled


@dataclass(frozen=True)
class InvalidSpec:
    """A file that is not a valid spec; ``name`` is the workload it names, when it still names one."""

    file: str
    field: str
    reason: str
    name: str | None = None

    def __str__(self) -> str:
        return str(SpecError(self.file, self.field, self.reason))


@dataclass(frozen=True)
class Registry:
    """Valid workloads by name (sorted), the invalid files (in file order) and the pairs of
    files refused for landing one topic into one dataset (each file also among ``invalid``)."""

    workloads: Mapping[str, RegisteredWorkload]
    invalid: tuple[InvalidSpec, ...] = ()
    overlaps: tuple[LandingOverlap, ...] = ()

    def specs(self) -> list[WorkloadSpec]:
        """The valid specs, by workload name."""
        return [workload.spec for workload in self.workloads.values()]


_Outcome = RegisteredWorkload | InvalidSpec
_StatKey = tuple[int, int, int, int, tuple[int, ...]]


@dataclass
class SpecCache:
    """Outcomes of earlier reads by file, valid while the file's ``stat`` and the environment match.

    Not thread-safe: give each sensor its own (a sensor's ticks never overlap).
    """

    _entries: dict[str, tuple[_StatKey, _Outcome]] = field(default_factory=dict)

    def __len__(self) -> int:
        return len(self._entries)

    def get(self, file: str, key: _StatKey) -> _Outcome | None:
        entry = self._entries.get(file)
        return entry[1] if entry is not None and entry[0] == key else None

    def put(self, file: str, key: _StatKey, outcome: _Outcome) -> None:
        self._entries[file] = (key, outcome)

    def retain(self, files: set[str]) -> None:
        """Forget files that are gone."""
        for file in self._entries.keys() - files:
            del self._entries[file]


def read_registry(
    directory: str | os.PathLike[str],
    *,
    env: Mapping[str, str] | None = None,
    cache: SpecCache | None = None,
) -> Registry:
    """Read every ``*.yaml``/``*.yml`` spec in ``directory`` without importing handlers.

    Raises ``FileNotFoundError`` when ``directory`` is not a directory: a missing mount must not
    read as "every workload was removed". An empty directory is a registry with no workloads.
    """
    path = Path(directory)
    if not path.is_dir():
        raise FileNotFoundError(f"workloads directory {os.fspath(path)!r} does not exist")
    environ = os.environ if env is None else env
    env_key = hash(frozenset(environ.items()))
    platform_key = _stat_key(config_path(environ))
    outcomes: list[_Outcome] = []
    files: set[str] = set()
    for spec_file in spec_files([path]):
        file = str(spec_file)
        try:
            st = spec_file.stat()
        except FileNotFoundError:
            continue  # removed between listing and stat: it is gone
        files.add(file)
        key = (st.st_mtime_ns, st.st_size, st.st_ino, env_key, platform_key)
        outcome = cache.get(file, key) if cache is not None else None
        if outcome is None:
            outcome = _read_one(file, environ)
            if cache is not None:
                cache.put(file, key, outcome)
        outcomes.append(outcome)
    if cache is not None:
        cache.retain(files)
    return _registry(outcomes)


def _stat_key(path: Path | None) -> tuple[int, ...]:
    """The platform config file's identity; empty when there is none."""
    try:
        st = path.stat() if path is not None else None
    except FileNotFoundError:
        return ()
    return () if st is None else (st.st_mtime_ns, st.st_size, st.st_ino)


def _read_one(file: str, env: Mapping[str, str]) -> _Outcome:
    try:
        spec = load_spec(file, env=env, import_handler=False)
    except SpecError as exc:
        return InvalidSpec(exc.file, exc.field, exc.reason, _declared_name(file))
    return RegisteredWorkload(spec, spec_hash(spec), file)


def _declared_name(file: str) -> str | None:
    """The ``name`` an invalid file declares, so the sensor can tell which workload it was."""
    try:
        name = read_yaml_mapping(file).get("name")
    except SpecError:
        return None
    return name if isinstance(name, str) and name else None


def _registry(outcomes: list[_Outcome]) -> Registry:
    files_by_name: dict[str, list[str]] = {}
    valid = [outcome for outcome in outcomes if isinstance(outcome, RegisteredWorkload)]
    for entry in valid:
        files_by_name.setdefault(entry.name, []).append(entry.file)
    # Over every file valid on its own, those of a name declared twice too: one of them may
    # still be running (held), and a new file must not land its topic a second time.
    overlaps = landing_overlaps((entry.file, entry.spec) for entry in valid)
    overlapping = reasons_by_file(overlaps)
    workloads: dict[str, RegisteredWorkload] = {}
    invalid: list[InvalidSpec] = []
    for outcome in outcomes:
        if isinstance(outcome, InvalidSpec):
            invalid.append(outcome)
            continue
        files = files_by_name[outcome.name]
        if len(files) == 1:
            if outcome.file in overlapping:
                reason = overlapping[outcome.file]
                invalid.append(InvalidSpec(outcome.file, "landing", reason, outcome.name))
            else:
                workloads[outcome.name] = outcome
            continue
        others = ", ".join(other for other in files if other != outcome.file)
        reason = (
            f"workload name {outcome.name!r} is also declared in {others}: "
            "rename one of them (neither file is used until then)"
        )
        invalid.append(InvalidSpec(outcome.file, "name", reason, outcome.name))
    return Registry(dict(sorted(workloads.items())), tuple(invalid), tuple(overlaps))
