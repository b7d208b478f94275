"""Where the platform finds its workload specs, its lake and its webserver: one home for the
three settings every code location, sensor tick and run reads.

A code location sets them when it builds the platform's definitions
(:func:`orchestration.platform.lanehouse_definitions`, or the Lanehouse component's fields).
Every process that serves or runs the location (code server, run worker, daemon) builds those
definitions on load, so each of them reads the same values. Without that they come from the
environment, as before: ``LANEHOUSE_WORKLOADS``, ``LANEHOUSE_LAKE`` (or ``LANEHOUSE_HOME``) and
``LANEHOUSE_DAGSTER_URL``.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Final
from urllib.parse import urlsplit

from pydantic import BaseModel, ConfigDict, field_validator

from consumers.config.loading import default_lake

WORKLOADS_ENV: Final = "LANEHOUSE_WORKLOADS"
URL_ENV: Final = "LANEHOUSE_DAGSTER_URL"
#: Where workload specs live unless ``LANEHOUSE_WORKLOADS`` says otherwise: the repository's
#: ``workloads/`` (this file is ``<repo>/orchestration/settings.py``).
DEFAULT_WORKLOADS_DIR: Final = Path(__file__).resolve().parents[1] / "workloads"


class PlatformSettings(BaseModel):
    """The platform's three places; paths are absolute (runs start in other directories)."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    workloads: Path
    lake: Path
    #: The webserver's address (``http://127.0.0.1:3000``), for the reloads the discovery
    #: sensor asks for when workload files change; None: the sensor says to reload by hand.
    dagster_url: str | None = None

    @field_validator("workloads", "lake")
    @classmethod
    def _absolute(cls, path: Path) -> Path:
        return path.expanduser().resolve()

    @field_validator("dagster_url")
    @classmethod
    def _url(cls, url: str | None) -> str | None:
        return check_dagster_url(url)


def check_dagster_url(url: str | None) -> str | None:
    """An http(s) address without its trailing slash, None for none; else ``ValueError``."""
    if url is None or not url.strip():
        return None
    url = url.strip().rstrip("/")
    parts = urlsplit(url)
    if parts.scheme not in ("http", "https") or not parts.hostname:
        raise ValueError(f"expected an http(s) address like http://127.0.0.1:3000, got {url!r}")
    return url


#: What a code location set explicitly in this process; every other field comes from the
#: environment when read (tests and the CLI move the environment between calls).
_overrides: dict[str, object] = {}


def configure(
    *,
    workloads: Path | str | None = None,
    lake: Path | str | None = None,
    dagster_url: str | None = None,
) -> PlatformSettings:
    """Set the places given for this process (one platform per process: the last code location
    built wins) and return the settings now in force; ``ValueError`` names a bad value."""
    given = {"workloads": workloads, "lake": lake, "dagster_url": dagster_url}
    wanted = {key: value for key, value in given.items() if value is not None}
    settings = PlatformSettings.model_validate({**_env(), **wanted})
    _overrides.clear()
    _overrides.update(wanted)
    return settings


def reset() -> None:
    """Forget what was configured: every field comes from the environment again."""
    _overrides.clear()


def _env() -> dict[str, object]:
    return {
        "workloads": os.environ.get(WORKLOADS_ENV) or DEFAULT_WORKLOADS_DIR,
        "lake": default_lake(),
        "dagster_url": os.environ.get(URL_ENV),
    }


def current() -> PlatformSettings:
    """The places configured in this process, the environment's for the others."""
    return PlatformSettings.model_validate({**_env(), **_overrides})
