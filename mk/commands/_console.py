"""The consoles the commands print with: rich, but never cut at 80 columns when the output is not a terminal."""

from __future__ import annotations

import sys
from typing import Any

#: the width used when stdout/stderr is a pipe or a file (rich would assume 80 and cut table cells)
PIPE_WIDTH = 200


def console(*, stderr: bool = False) -> Any:
    from rich.console import Console

    stream = sys.stderr if stderr else sys.stdout
    isatty = getattr(stream, "isatty", None)
    width = None if isatty is not None and isatty() else PIPE_WIDTH
    return Console(stderr=stderr, highlight=False, width=width)


def is_terminal(con: Any) -> bool:
    """Whether ``con`` writes to a terminal (a pipe or a file gets whole lines, never cut or wrapped)."""
    isatty = getattr(con.file, "isatty", None)
    return bool(isatty and isatty())


def print_whole(con: Any, renderable: Any) -> None:
    """Print ``renderable`` (a panel, a table) at the console's width on a terminal, and at its own full width when
    the output is a pipe or a file: nothing is wrapped at 80 columns there."""
    if is_terminal(con):
        con.print(renderable)
        return
    from rich.measure import Measurement

    wide = con.options.update_width(100_000)
    kept = con.width
    con.width = max(Measurement.get(con, wide, renderable).maximum, 20)  # print(width=) is capped at the console's width
    try:
        con.print(renderable)
    finally:
        con.width = kept
