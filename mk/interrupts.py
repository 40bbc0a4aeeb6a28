"""Ctrl-C and SIGTERM for the command line: each ends the command as a ``KeyboardInterrupt`` (the run is marked
interrupted with its resume command), and is remembered, so one that Python swallowed is raised at the next phase.

Python drops an exception raised while it runs a garbage-collection callback ("Exception ignored in
_xla_gc_callback"): a Ctrl-C that lands there would otherwise be lost and the run would go on to finish.
:func:`raise_if_pending` (called before each phase, ``programs.auto.Auto.step``) raises it again."""

from __future__ import annotations

import signal
import threading
from typing import Any

_pending = threading.Event()


def install() -> None:
    """Handle SIGINT and SIGTERM in this (main) thread; a second SIGTERM kills at once."""
    _pending.clear()  # a command that begins has been asked nothing yet

    def stop(signum: int, frame: Any) -> None:
        _pending.set()
        if signum == signal.SIGTERM:
            signal.signal(signal.SIGTERM, signal.SIG_DFL)
        raise KeyboardInterrupt

    try:
        signal.signal(signal.SIGINT, stop)
        signal.signal(signal.SIGTERM, stop)
    except ValueError:  # not the main thread (mk.cli.main called from a worker thread): leave the defaults
        pass


def raise_if_pending() -> None:
    """Raise the interrupt a signal asked for, if it has not ended the command yet."""
    if _pending.is_set():
        raise KeyboardInterrupt
