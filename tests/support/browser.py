"""A real browser for the UI tests: Debian's chromium driven by playwright, with Dagster's
community dialog out of the way."""

from __future__ import annotations

import shutil
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import pytest

CHROMIUM = shutil.which("chromium") or "/usr/bin/chromium"


@contextmanager
def chromium_page() -> Iterator[Any]:
    """A playwright ``Page`` (typed ``Any``: playwright is imported only when a test runs)."""
    from playwright.sync_api import sync_playwright

    if not Path(CHROMIUM).exists():
        pytest.fail("chromium is not installed: `make test` installs it (Debian package chromium)")
    with sync_playwright() as driver:
        browser = driver.chromium.launch(
            executable_path=CHROMIUM, args=["--no-sandbox", "--disable-gpu"]
        )
        try:
            page = browser.new_page(viewport={"width": 1400, "height": 900})
            # A fresh instance shows a "Join the Dagster community" dialog at a moment of its
            # choosing, possibly under another dialog where Skip cannot be clicked. The browser's
            # flag (and the instance's, see `nux_seen`) mark it seen; the handler is a fallback.
            page.add_init_script("window.localStorage.setItem('communityNux', '\"1\"')")
            skip = page.get_by_role("button", name="Skip")
            page.add_locator_handler(skip, lambda: skip.click())
            yield page
        finally:
            browser.close()


def nux_seen(dagster_home: Path) -> None:
    """Record in the instance that its community dialog was shown (Dagster checks this file)."""
    seen = dagster_home / ".nux" / "nux.yaml"
    seen.parent.mkdir(parents=True, exist_ok=True)
    seen.write_text("seen: 1\n")


def park(page: Any) -> None:
    """Leave the Dagster UI for a blank page while a test waits on something else. Measured on
    2 cores, chromium's CPU for an open page: the runs list ~9 CPU-s a minute and a sensor's
    page ~12 (live updates), an asset's page ~3, a blank page 1.6; a page load ~2.3 CPU-s."""
    page.goto("about:blank")
