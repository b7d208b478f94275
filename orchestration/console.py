"""The CLI's standard-error console, its error line, and the one rule for how a command fails:
an error Lanehouse raised on purpose is one red line and an exit status, never a traceback."""

from __future__ import annotations

from types import TracebackType

import typer
from rich.console import Console
from rich.markup import escape

from consumers import LanehouseError

err_console = Console(stderr=True)


def print_error(message: str) -> None:
    """``error: <message>`` in red on standard error (the message is not markup). Not folded
    to the console's width: a path or name in it stays whole, to copy and to grep."""
    err_console.print(f"[red]error:[/red] {escape(message)}", highlight=False, soft_wrap=True)


class _ExitOn:
    def __init__(self, errors: tuple[type[BaseException], ...], code: int) -> None:
        self.errors = errors
        self.code = code

    def __enter__(self) -> None:
        return None

    def __exit__(
        self,
        kind: type[BaseException] | None,
        exc: BaseException | None,
        traceback: TracebackType | None,
    ) -> None:
        if exc is not None and isinstance(exc, self.errors):
            print_error(str(exc))
            if isinstance(exc, LanehouseError) and (where := exc.context()):
                err_console.print(
                    f"  {escape(where)}", style="dim", highlight=False, soft_wrap=True
                )
            raise typer.Exit(self.code) from exc


def exits_on(*errors: type[BaseException], code: int = 1) -> _ExitOn:
    """``with exits_on():`` a ``LanehouseError`` (or the given errors) raised in the block prints
    ``error: ...`` and exits with ``code`` (1: it failed; 2: the input was invalid)."""
    return _ExitOn(errors or (LanehouseError,), code)
