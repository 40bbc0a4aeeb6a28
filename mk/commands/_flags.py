"""Argument types and flag groups the commands share (``--budget-*``, ``--explore``, counts)."""

from __future__ import annotations

import argparse
from typing import Any


def positive_int(text: str) -> int:
    """argparse type: an integer >= 1."""
    value = int(text)
    if value < 1:
        raise argparse.ArgumentTypeError(f"must be at least 1, got {value}")
    return value


def non_negative_int(text: str) -> int:
    """argparse type: an integer >= 0."""
    value = int(text)
    if value < 0:
        raise argparse.ArgumentTypeError(f"must be 0 or more, got {value}")
    return value


def non_negative_float(text: str) -> float:
    """argparse type: a number >= 0."""
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"must be a number, got {text!r}") from None
    if not value >= 0:
        raise argparse.ArgumentTypeError(f"must be 0 or more, got {text}")
    return value


def add_explore_flag(p: argparse.ArgumentParser) -> None:
    p.add_argument("--explore", action="store_true",
                   help="with a model and no device of the target: keep asking it after the first correct kernel (by default "
                        "the run stops there, since nothing can be timed to show a later kernel is faster)")


def add_budget_flags(p: argparse.ArgumentParser, what: str = "") -> None:
    """``--budget-calls``, ``--budget-cost``, ``--budget-time`` (``what`` prefixes the help, e.g. "a new budget: ")."""
    p.add_argument("--budget-calls", type=non_negative_int, default=None, help=f"{what}stop after this many LM calls")
    p.add_argument("--budget-cost", type=non_negative_float, default=None,
                   help=f"{what}stop once the estimated LM cost reaches this many USD")
    p.add_argument("--budget-time", type=non_negative_float, default=None, help=f"{what}stop after this many seconds of wall time")


def budget_from(args: argparse.Namespace) -> Any:
    """The :class:`mk.budget.Budget` the flags give, or None when none was given."""
    from mk.budget import Budget

    budget = Budget(args.budget_calls, args.budget_cost, args.budget_time)
    return None if budget.unlimited else budget
