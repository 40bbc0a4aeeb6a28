"""The contracts between mk's components: what an author is given and returns, and what a run keeps.

:class:`Plan` (what an author intends), :class:`Context` (what it sees when it plans, implements or fixes),
:class:`Snapshot` (one iteration as a run keeps it: code, verdict, tuned config, profile), :class:`Author` (the
contract every author keeps, with defaults for what it may leave out) and :func:`as_author`, and
:func:`declined_reason` (a run's stop reason when no rule applied). A leaf module: it imports only the standard
library and the error hierarchy; the types it names from the rest of mk are annotations only. The kernel an author
proposes is :class:`mk.author.proposal.Proposal`, the judge's verdict :class:`mk.harness.results.EvalResult`.
"""

from __future__ import annotations

import copy
import textwrap
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Mapping

from mk.errors import ConfigError

if TYPE_CHECKING:  # annotations only: importing these here would make the contracts depend on the core
    from mk.harness.results import EvalResult
    from mk.profile import ProfileReport
    from mk.task import Task


@dataclass
class Plan:
    """What the author intends to try: a short name, readable text, and its structured form."""

    name: str
    text: str
    data: Any = None


@dataclass
class Context:
    """What an author sees when it plans, implements or fixes."""

    task: Task
    target: str
    history: list["Snapshot"]
    feedback: str = ""
    run_id: str | None = None
    node_id: str | None = None  # the node of the attempt in flight, once its code exists
    iteration: int = 0  # the attempt in flight (0 outside an Auto loop)
    plan: "Plan | None" = None  # the attempt's plan (what a fixer must keep), once chosen
    lessons: str = ""  # what earlier runs learned that fits this call (mk.lessons): fixes for a fixer, plans for a planner


@dataclass
class Snapshot:
    iteration: int
    proposal: str
    rationale: str
    source: str
    config: dict[str, Any]
    status: str
    reason: str
    speedup: float | None
    result: EvalResult | None
    node_id: str | None = None
    tuning_note: str = ""
    failed_phase: str | None = None
    profile: ProfileReport | None = None
    feedback: str = ""

    @property
    def correct(self) -> bool:
        return self.status == "correct"

    @property
    def compile_check(self) -> str:
        """Which chip compile judged it (``EvalResult.compile_check``), "" without a verdict."""
        return self.result.compile_check if self.result is not None else ""

    @property
    def estimate(self) -> Any:
        """Without the device: the compiler's estimated speedup (``EvalResult.estimate``), never a measurement."""
        return self.result.estimate if self.result is not None else None

    @property
    def covered(self) -> dict[str, Any]:
        """Declared sizes the verdict claims without running them (``EvalResult.covered``)."""
        return dict(self.result.covered) if self.result is not None else {}

    @property
    def compiled(self) -> list[Any]:
        """The chip compiler's figures per scale (``EvalResult.compiled``)."""
        return list(self.result.compiled) if self.result is not None else []

    def summary(self) -> str:
        """One line for the next plan: what was tried and what the judge said."""
        parts = [f"iteration {self.iteration} ({self.proposal}): {self.status}"]
        if self.failed_phase:
            parts.append(f"failed in {self.failed_phase}")
        if self.reason:
            parts.append(self.reason)
        if self.speedup is not None:
            parts.append(f"speedup {self.speedup:.2f}x")
        if self.config:
            parts.append(f"config {self.config}")
        if self.feedback:
            parts.append(self.feedback)
        return "; ".join(parts)


def declined_reason(declined: Mapping[str, str], width: int = 100) -> str:
    """The stop reason of a run whose author proposed nothing: a header line, then one line per rule that declined
    (``  name: why``, the reasons in one column), no line wider than ``width``. A long reason wraps under itself; one
    past three lines (an exception's text) ends in `` ...`` there (the report's ``declined`` has it whole)."""
    if not declined:
        return "no rule applies to this task"
    pad = min(max(len(name) for name in declined) + 1, 24)
    lines = ["no rule applies to this task; why each rule declined it:"]
    for name, why in declined.items():
        head = f"  {name + ':':<{pad}} "
        text = " ".join(str(why).split()) or "(no reason given)"
        lines += textwrap.wrap(text, width=max(width, len(head) + 20), initial_indent=head,
                               subsequent_indent=" " * len(head), max_lines=3, placeholder=" ...",
                               break_on_hyphens=False)
    return "\n".join(lines)


class Author:
    """The contract every author keeps (the offline rules, the LM sub-agents, a person's scripted one).

    Required: ``name``, :meth:`plan` and :meth:`implement`. The rest have defaults an author overrides when it has
    more to say: :meth:`fix` (repair a compile error / static rejection; default: cannot), :meth:`analyse` (read a
    profile; default: nothing), :meth:`prepare` (synthesised test cases before the suite is frozen), :meth:`fork`
    (a fresh author for a search node), :meth:`bind_run` (attribute its model calls to a run), :meth:`spend` (what it
    has spent), ``stop_reason`` (why it has no further plan), ``declined`` (why it made no proposal, per rule;
    :func:`declined_reason` makes it the run's stop reason),
    ``meter`` (the budget its calls are charged to), ``spec`` (the string that rebuilds it: ``offline``,
    ``lm:<model>`` or ``module:Factory``; "" when it cannot be rebuilt in another process)."""

    name: str = "author"
    spec: str = ""
    stop_reason: str = ""
    declined: dict[str, str] = {}
    meter: Any = None

    def plan(self, ctx: Any) -> Any:
        raise NotImplementedError

    def implement(self, ctx: Any, plan: Any) -> Any:
        raise NotImplementedError

    def fix(self, ctx: Any, proposal: Any, error: str) -> Any:
        return None

    def analyse(self, ctx: Any, report: Any) -> str:
        return ""

    def prepare(self, task: Task, target: str) -> tuple[Task, list[Any]]:
        return task, []

    def fork(self, **kwargs: Any) -> "Author":
        return copy.deepcopy(self)

    def bind_run(self, run_id: str | None) -> None:
        return None

    def spend(self) -> dict[str, Any]:
        """LM calls and cost charged so far (``{}`` for an author that calls no model)."""
        if self.meter is None:
            return {}
        u = self.meter.usage()
        return {"lm_calls": u.lm_calls, "cost_usd": u.cost_usd}


class Adapted(Author):
    """An object that plans and implements but does not derive from :class:`Author`, with the contract's defaults
    for what it lacks (tests and notebooks write such authors)."""

    def __init__(self, inner: Any):
        for required in ("plan", "implement"):
            if not callable(getattr(inner, required, None)):
                raise ConfigError(f"{type(inner).__name__} is not an author: it has no {required}() method",
                                  hint="an author needs name, plan(ctx) and implement(ctx, plan); see mk.contracts.Author")
        self.inner = inner
        self.name = str(getattr(inner, "name", type(inner).__name__))

    def __getattr__(self, item: str) -> Any:  # what the inner author has (only called for what Adapted lacks)
        if item == "inner":
            raise AttributeError(item)
        return getattr(self.inner, item)

    # the contract's attributes read through to the inner author (class defaults would shadow them otherwise)
    spec = property(lambda self: getattr(self.inner, "spec", "") or "")
    stop_reason = property(lambda self: getattr(self.inner, "stop_reason", "") or "")
    declined = property(lambda self: getattr(self.inner, "declined", None) or {})
    meter = property(lambda self: getattr(self.inner, "meter", None))

    def plan(self, ctx: Any) -> Any:
        return self.inner.plan(ctx)

    def implement(self, ctx: Any, plan: Any) -> Any:
        return self.inner.implement(ctx, plan)

    def fix(self, ctx: Any, proposal: Any, error: str) -> Any:
        f = getattr(self.inner, "fix", None)
        return f(ctx, proposal, error) if callable(f) else None

    def analyse(self, ctx: Any, report: Any) -> str:
        f = getattr(self.inner, "analyse", None)
        return f(ctx, report) if callable(f) else ""

    def prepare(self, task: Task, target: str) -> tuple[Task, list[Any]]:
        f = getattr(self.inner, "prepare", None)
        return f(task, target) if callable(f) else (task, [])

    def fork(self, **kwargs: Any) -> Author:
        f = getattr(self.inner, "fork", None)
        return as_author(f(**kwargs) if callable(f) else copy.deepcopy(self.inner))

    def bind_run(self, run_id: str | None) -> None:
        f = getattr(self.inner, "bind_run", None)
        if callable(f):
            f(run_id)

    def spend(self) -> dict[str, Any]:
        f = getattr(self.inner, "spend", None)
        return f() if callable(f) else Author.spend(self)


def as_author(obj: Any) -> Author:
    """``obj`` as an :class:`Author`: itself when it derives from it, else wrapped with the contract's defaults."""
    return obj if isinstance(obj, Author) else Adapted(obj)
