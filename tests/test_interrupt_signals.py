"""mk/interrupts.py: a Ctrl-C that Python swallowed (it drops an exception raised in a garbage-collection callback:
seen in CI as a HITL run that went on to finish after Ctrl-C) is raised again before the next phase."""

from __future__ import annotations

import signal

import pytest

from mk import interrupts

pytestmark = pytest.mark.unit


@pytest.fixture
def handlers():
    saved = signal.getsignal(signal.SIGINT), signal.getsignal(signal.SIGTERM)
    yield
    signal.signal(signal.SIGINT, saved[0])
    signal.signal(signal.SIGTERM, saved[1])
    interrupts._pending.clear()


def test_a_swallowed_ctrl_c_is_raised_before_the_next_phase(handlers):
    interrupts.install()
    interrupts.raise_if_pending()  # nothing asked yet
    try:
        signal.raise_signal(signal.SIGINT)
    except KeyboardInterrupt:
        pass  # what Python does to an exception raised in a gc callback: dropped
    with pytest.raises(KeyboardInterrupt):
        interrupts.raise_if_pending()
    interrupts.install()  # the next command starts clean
    interrupts.raise_if_pending()


def test_sigterm_is_an_interrupt_once_then_the_default(handlers):
    interrupts.install()
    with pytest.raises(KeyboardInterrupt):
        signal.raise_signal(signal.SIGTERM)
    assert signal.getsignal(signal.SIGTERM) == signal.SIG_DFL
