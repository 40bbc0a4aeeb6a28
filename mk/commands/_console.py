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
