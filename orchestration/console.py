"""The CLI's standard-error console and its error line, shared by every command module."""

from __future__ import annotations

from rich.console import Console
from rich.markup import escape

err_console = Console(stderr=True)


def print_error(message: str) -> None:
    """``error: <message>`` in red on standard error (the message is not markup)."""
    err_console.print(f"[red]error:[/red] {escape(message)}", highlight=False)
