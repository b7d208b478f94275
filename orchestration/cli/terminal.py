"""What long-running commands share on the terminal: the progress bar, stopping on SIGINT or
SIGTERM, and keeping dependencies' notices out of a user's way."""

from __future__ import annotations

import contextlib
import signal
import threading
import warnings
from collections.abc import Iterator
from types import FrameType

from rich.progress import (
    BarColumn,
    MofNCompleteColumn,
    Progress,
    ProgressColumn,
    Task,
    TextColumn,
    TimeElapsedColumn,
    TimeRemainingColumn,
)
from rich.text import Text

from orchestration.console import err_console


@contextlib.contextmanager
def stop_on_signal() -> Iterator[threading.Event]:
    """An event set by SIGINT or SIGTERM while inside; the previous handlers come back after."""
    stop = threading.Event()

    def on_signal(signum: int, frame: FrameType | None) -> None:
        stop.set()

    previous = {sig: signal.signal(sig, on_signal) for sig in (signal.SIGINT, signal.SIGTERM)}
    try:
        yield stop
    finally:
        for sig, handler in previous.items():
            signal.signal(sig, handler)


class RateColumn(ProgressColumn):
    def render(self, task: Task) -> Text:
        speed = task.finished_speed or task.speed
        return Text(f"{speed:,.0f} rec/s" if speed else "- rec/s", style="progress.data.speed")


def progress_bar(transient: bool = False) -> Progress:
    """The progress bar of long commands: count, records per second, time."""
    return Progress(
        TextColumn("[bold]{task.description}"),
        BarColumn(),
        MofNCompleteColumn(),
        RateColumn(),
        TimeElapsedColumn(),
        TimeRemainingColumn(),
        console=err_console,
        transient=transient,
    )


@contextlib.contextmanager
def quiet_dependencies(verbose: bool) -> Iterator[None]:
    """Inside, Dagster's beta and preview notices (about APIs Lanehouse chose, not anything the
    user did) are hidden unless ``verbose``. Imports Dagster: for commands that run it."""
    with warnings.catch_warnings():
        if not verbose:
            from dagster import BetaWarning, PreviewWarning

            warnings.simplefilter("ignore", BetaWarning)
            warnings.simplefilter("ignore", PreviewWarning)
        yield
