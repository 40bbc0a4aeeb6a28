"""The one budget stop reason every mode records: which budget, how much of it was spent, and the command that
continues the run with a new one.

    >>> budget_stop_reason(meter, "mk resume 3f2a")        # doctest: +SKIP
    'budget spent: wall-time budget, 1.2 s of 1.0 s; continue with a new budget: mk resume 3f2a --budget-time 1'

Auto, HITL (through Auto), search, the bench methods and the benchmark itself build it here; :func:`is_budget_stop`
recognises it.
"""

from __future__ import annotations

from typing import Any

#: the words every budget stop reason starts with (and holds once)
SPENT = "budget spent: "


def spent_budget(meter: Any) -> tuple[str, str, str] | None:
    """``(what, "<used> of <limit>", flag)`` for the first limit of ``meter`` (a :class:`mk.budget.BudgetMeter`)
    that is reached, in the order the meter checks them, or None while every limit has some left."""
    if meter is None:
        return None
    b, u = meter.budget, meter.usage()
    if b.max_lm_calls is not None and u.lm_calls >= b.max_lm_calls:
        return "LM-call", f"{u.lm_calls} of {b.max_lm_calls} calls", f"--budget-calls {b.max_lm_calls or 'N'}"
    if b.max_cost_usd is not None and u.cost_usd >= b.max_cost_usd:
        return "cost", f"${u.cost_usd:.4f} of ${b.max_cost_usd:g}", f"--budget-cost {b.max_cost_usd:g}" if b.max_cost_usd else "--budget-cost USD"
    if b.max_wall_s is not None and u.wall_s >= b.max_wall_s:
        return "wall-time", f"{u.wall_s:.1f} s of {b.max_wall_s:g} s", f"--budget-time {b.max_wall_s:g}" if b.max_wall_s else "--budget-time SECONDS"
    return None


def budget_stop_reason(meter: Any, resume: str | None, *, then: str = "", fallback: str = "") -> str | None:
    """The stop reason for a spent budget: ``budget spent: <what> budget, <used> of <limit>[; then]; continue with a new
    budget: <resume> --budget-<flag> <limit>``. ``resume`` is the command that continues the run (None: the run cannot
    be continued, the clause is left out); ``then`` says what the mode did (``beam search stopped at 4 nodes``).
    None when no limit of ``meter`` is reached, unless ``fallback`` (what the budget error said) is given."""
    spent = spent_budget(meter)
    if spent is not None:
        what, amount, flag = spent
        reason = f"{SPENT}{what} budget, {amount}"
    elif fallback:  # a budget error from a meter this caller does not hold: its own words, one "budget spent"
        text = fallback.removeprefix("the run stopped: ").replace(" budget spent: ", " budget, ", 1)  # "wall-time budget spent: x"
        reason, flag = (text if text.startswith(SPENT) else SPENT + text), "with --budget-calls N, --budget-cost USD or --budget-time SECONDS"
    else:
        return None
    if then:
        reason += f"; {then}"
    if resume and resume.startswith("mk.resume("):  # a Python function's run: the Budget field, not the CLI flag
        field = {"--budget-calls": "max_lm_calls", "--budget-cost": "max_cost_usd", "--budget-time": "max_wall_s"}
        given = [f"{field[f]}=..." for f in field if f in flag]
        reason += f"; continue with a new budget: {resume}, passing budget=mk.budget.Budget({', '.join(given)})"
    elif resume:
        reason += f"; continue with a new budget: {resume} {flag}"
    return reason


def is_budget_stop(reason: str | None) -> bool:
    """Whether ``reason`` is a budget stop reason (built by :func:`budget_stop_reason`)."""
    return reason is not None and reason.startswith(SPENT)
