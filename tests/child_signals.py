"""For tests that interrupt a child `mk`: a test run started as a background job of a non-interactive shell
(`pytest &`, `nohup pytest &`) inherits SIGINT and SIGQUIT ignored, its children too, and a Python started with
SIGINT ignored never turns it into KeyboardInterrupt. Pass ``preexec_fn=default_signals`` to restore them."""

import signal


def default_signals() -> None:
    for sig in (signal.SIGINT, signal.SIGQUIT):
        signal.signal(sig, signal.SIG_DFL)
