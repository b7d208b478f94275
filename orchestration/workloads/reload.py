"""Definitions that follow the workload files: the discovery sensor asks the webserver to reload
the code location when the files no longer match what the definitions were built from.

Dagster builds a code location's assets once, when it loads. The workload pages
(``workloads/<name>``), their checks, the topics' and ``landed_<dataset>`` assets all derive
from the specs, so without a reload a workload added at runtime would get its run from the
sensor within a tick, but its assets would show as "no software definition" until someone
reloaded the location by hand. The sensor reads the files every tick anyway: when what it reads
differs from what was loaded, it sends the webserver's ``reloadRepositoryLocation`` mutation,
the same the UI's "Reload" button sends, from a background thread so the tick never waits on
it. The webserver reloads the code server; the daemon picks up the new definitions on its next
workspace refresh (within a minute).

Which location: the one the sensor's tick reports (its name in the workspace: ``lanehouse`` in
this repository, the project's name under ``dg dev``), else ``LANEHOUSE_CODE_LOCATION``, else
``lanehouse``. Where: the platform's ``dagster_url`` (:mod:`orchestration.settings`: the
component's field or ``LANEHOUSE_DAGSTER_URL``, e.g. ``http://127.0.0.1:3000``; ``lanehouse
up`` and the compose stack set it). Without the URL the tick warns with what is missing.

A workload whose file turned invalid asks for no reload: the sensor holds its runs on the last
valid spec, and its page keeps showing them ("held") until the location loads again for another
reason; a load leaves out invalid files, and with them that workload's assets.
"""

from __future__ import annotations

import logging
import os
import threading
from collections.abc import Iterable
from pathlib import Path
from typing import Final

from consumers import WorkloadSpec
from orchestration import settings
from orchestration.workloads.discovery_model import Message
from orchestration.workloads.registry import Registry

LOCATION_ENV: Final = "LANEHOUSE_CODE_LOCATION"
DEFAULT_LOCATION: Final = "lanehouse"
#: A reload asked for and not yet seen (the same files still differ) is asked again after this.
RETRY_SECONDS: Final = 60.0

RELOAD_MUTATION: Final = (
    "mutation($location: String!) { reloadRepositoryLocation(repositoryLocationName: $location)"
    " { __typename ... on PythonError { message } } }"
)

log = logging.getLogger(__name__)

#: What each workload's definitions are built from, by workload name.
Signature = dict[str, str]

#: The workloads directory the definitions were built from, and what they were built from.
_loaded: tuple[Path, Signature] | None = None


def signature(specs: Iterable[WorkloadSpec]) -> Signature:
    """The parts of each spec that definitions show: source, dataset, owners, tags, checks and
    the handler's name (not its engine settings)."""
    return {
        spec.name: repr(
            (
                spec.source.kind,
                tuple(spec.source.topics),
                spec.landing.dataset if spec.landing is not None else None,
                spec.owners,
                sorted(spec.tags.items()),
                spec.checks.model_dump(),
                spec.handler,
            )
        )
        for spec in specs
    }


def definitions_loaded(directory: Path, specs: Iterable[WorkloadSpec]) -> None:
    """Called by the code location as it builds its definitions from ``specs`` in ``directory``."""
    global _loaded
    _loaded = (directory.resolve(), signature(specs))


def differences(loaded: Signature, current: Signature) -> str:
    """``added a; removed b; changed c``: what the files changed since the load."""
    parts = []
    for label, names in (
        ("added", sorted(current.keys() - loaded.keys())),
        ("removed", sorted(loaded.keys() - current.keys())),
        ("changed", sorted(n for n in current.keys() & loaded.keys() if current[n] != loaded[n])),
    ):
        if names:
            parts.append(f"{label} {', '.join(names)}")
    return "; ".join(parts)


class Reloader:
    """Asks for a reload once per difference (again after :data:`RETRY_SECONDS`)."""

    def __init__(self) -> None:
        self._asked: tuple[str, float] | None = None

    def check(
        self, directory: Path, registry: Registry, now: float, location: str | None = None
    ) -> Message | None:
        """``registry``: what the sensor read from ``directory`` this tick; ``location``: the
        code location the tick's sensor belongs to, as Dagster names it (None outside one)."""
        if _loaded is None or _loaded[0] != directory.resolve():
            return None  # no definitions were built from it in this process (a test's sensor)
        loaded = _loaded[1]
        current = signature(registry.specs())
        held = {i.name for i in registry.invalid if i.name is not None and i.name in loaded}
        current.update({name: loaded[name] for name in held})
        if current == loaded:
            self._asked = None
            return None
        what = differences(loaded, current)
        url = settings.current().dagster_url or ""
        location = location or os.environ.get(LOCATION_ENV, "").strip() or DEFAULT_LOCATION
        if not url:
            return Message(
                "warning",
                f"the code location's assets are behind the workload files ({what}): reload "
                f"location {location!r} in the UI, or set {settings.URL_ENV} (or the component's dagster_url) to the webserver's address "
                "so the sensor does it",
            )
        if (
            self._asked is not None
            and self._asked[0] == what
            and now - self._asked[1] < (RETRY_SECONDS)
        ):
            return Message("info", f"definitions reload asked for ({what}); waiting for it")
        self._asked = (what, now)
        threading.Thread(
            target=_reload, args=(url.rstrip("/"), location), name="lh-reload", daemon=True
        ).start()
        return Message(
            "info", f"workload files changed ({what}): reloading code location {location!r}"
        )


def _reload(url: str, location: str) -> None:
    from orchestration.graphql import graphql

    try:
        data = graphql(url, RELOAD_MUTATION, {"location": location}, timeout=120)
    except Exception as exc:  # logged; the next tick that still sees the difference asks again
        log.warning("reloading code location %r through %s failed: %s", location, url, exc)
        return
    reply = data.get("reloadRepositoryLocation") or {}
    if reply.get("__typename") != "WorkspaceLocationEntry":
        log.warning("reloading code location %r: %s", location, reply)
