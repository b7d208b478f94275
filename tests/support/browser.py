"""A real browser for the UI tests: Debian's chromium driven by playwright, with Dagster's
community dialog out of the way."""

from __future__ import annotations

import json
import shutil
import time
from collections.abc import Callable, Iterator
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


class GraphqlWatch:
    """The GraphQL requests a page sent and has no answer to yet: what a page stuck loading waits
    for, named in a test's failure."""

    def __init__(self, page: Any) -> None:
        self._page, self._open = page, dict[Any, tuple[str, float]]()
        page.on("request", self._sent)
        page.on("requestfinished", self._answered)
        page.on("requestfailed", self._answered)

    def _sent(self, request: Any) -> None:
        if request.url.endswith("/graphql") and request.method == "POST":
            # Not ``post_data_json``: it raises on a body that is not JSON, and an exception in a
            # listener fails whatever the page is doing.
            try:
                body = json.loads(request.post_data or "{}")
            except ValueError:
                body = {}
            name = body.get("operationName") if isinstance(body, dict) else None
            self._open[request] = (str(name or "?"), time.monotonic())

    def _answered(self, request: Any) -> None:
        self._open.pop(request, None)

    def waiting(self) -> list[str]:
        now = time.monotonic()
        return [f"{name} ({now - sent:.0f} s)" for name, sent in self._open.values()]

    def close(self) -> None:
        self._page.remove_listener("request", self._sent)
        self._page.remove_listener("requestfinished", self._answered)
        self._page.remove_listener("requestfailed", self._answered)


def show(
    page: Any,
    url: str,
    text: str,
    shot: Path,
    *,
    tries: int = 3,
    seconds: int = 30,
    log: Callable[[], str] | None = None,
) -> None:
    """Open ``url`` until ``text`` shows, reloading the page as a person would when it stays
    blank: in one clean-clone run a workload's page kept only its section headings for 60 s,
    its figures already in the event log. Each try that fails leaves a screenshot beside
    ``shot``; the failure names the GraphQL queries left unanswered, for the next such run,
    and ends with ``log()`` (the webserver's last lines)."""
    from playwright.sync_api import expect

    watch = GraphqlWatch(page)
    waited: list[str] = []
    try:
        for attempt in range(tries):
            if attempt == 0:
                page.goto(url)
            else:
                page.reload()
            try:
                expect(page.get_by_text(text).first).to_be_visible(timeout=seconds * 1000)
                page.screenshot(path=shot)
                return
            except AssertionError:
                waited.append(f"try {attempt + 1}: " + (", ".join(watch.waiting()) or "none"))
                page.screenshot(path=shot.with_name(f"{shot.stem}-try-{attempt + 1}.png"))
        said = f"\n{log()}" if log is not None else ""
        raise AssertionError(f"{text!r} never showed on {url}; queries unanswered: {waited}{said}")
    finally:
        watch.close()
