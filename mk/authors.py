"""Choosing the author of a run: the LM sub-agents when a model is configured, else the offline rules.

:func:`resolve_author` follows :func:`mk.lm.resolve_lm` (``lm=`` / ``--lm`` →
``MK_LM`` → Gemini keys → offline). With a model, the author is
:class:`mk.programs.lm_author.LMAuthor` over the model wrapped by
:func:`mk.lm.accounted` (every call budgeted and recorded in ``store`` under
``run_id``) and the knowledge store, opened on first use; a store that cannot
be opened is logged and the author goes on without retrieval.
:func:`prepare_suite` freezes the suite with the author's synthesised cases.
"""

from __future__ import annotations

import logging
import textwrap
from pathlib import Path
from typing import Any, Mapping

from mk.errors import KnowledgeError
from mk.task import Task

log = logging.getLogger(__name__)


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
        import copy

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
                from mk.errors import ConfigError

                raise ConfigError(f"{type(inner).__name__} is not an author: it has no {required}() method",
                                  hint="an author needs name, plan(ctx) and implement(ctx, plan); see mk.authors.Author")
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
        return as_author(f(**kwargs) if callable(f) else __import__("copy").deepcopy(self.inner))

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


class LazyKnowledge:
    """A knowledge store opened on the first ``retrieve``; if it cannot be opened, retrieval is off (logged once)."""

    def __init__(self, kb_dir: str | Path | None = None):
        self.kb_dir = kb_dir
        self._store: Any = None
        self._failed: str | None = None

    def retrieve(self, query: str, k: int = 5, target: str | None = None) -> str:
        """Passages for ``query``; with ``target`` (tpu, gpu, cpu) the other platform's passages come last."""
        if self._failed is not None:
            return ""
        if self._store is None:
            try:
                from mk.retrievers import KnowledgeStore

                self._store = KnowledgeStore.open(self.kb_dir)
            except (KnowledgeError, OSError, ValueError, ImportError) as exc:
                self._failed = str(exc)
                log.warning("the knowledge store could not be opened (%s); the LM author works without retrieval", exc)
                return ""
        try:
            return self._store.retrieve(query, k, target=target)
        except (KnowledgeError, OSError, ValueError) as exc:
            self._failed = str(exc)
            log.warning("the knowledge store failed (%s); the LM author works without retrieval from now on", exc)
            return ""


def resolve_author(lm: Any = None, *, store: Any = None, run_id: str | None = None, budget: Any = None,
                   knowledge: Any = None, explore: bool = False) -> tuple[Any, str]:
    """Return ``(author, announcement)``.

    ``lm``: None (resolve from the environment), ``"offline"``, a DSPy model
    string or a ``dspy.LM``. ``budget``: a :class:`mk.budget.Budget` or a
    :class:`mk.budget.BudgetMeter` (pass the meter that Auto checks, so the LM
    calls count against it; the author's ``meter`` is the one in use).
    ``knowledge``: a retriever (``retrieve(query, k)``) or None for the
    default knowledge store, opened lazily. ``explore``: without a device of the target, keep asking the model
    after the first correct kernel (by default the LM author stops there: nothing more can be measured)."""
    from mk.author import ANNOUNCEMENT, OfflineAuthor
    from mk.author.adapter import OfflineAuthorAdapter
    from mk.lm import Accountant, accounted, resolve_lm

    if isinstance(lm, str) and lm.strip() == "offline":
        return OfflineAuthorAdapter(OfflineAuthor()), ANNOUNCEMENT
    choice = resolve_lm(lm)
    if choice.offline:
        return OfflineAuthorAdapter(OfflineAuthor()), ANNOUNCEMENT
    from mk.programs.lm_author import LMAuthor

    accountant = Accountant(store, run_id=run_id, budget=budget)
    agent_lms = {agent: accounted(resolve_lm(model).lm, accountant) for agent, model in agent_models().items()}
    author = LMAuthor(accounted(choice.lm, accountant), knowledge=knowledge if knowledge is not None else LazyKnowledge(),
                      model=choice.model, explore_without_device=explore, agent_lms=agent_lms)
    if choice.kind != "explicit" or isinstance(lm, str):  # built from a model string: a later session rebuilds it the same way
        author.spec = f"lm:{choice.model}"
    announcement = (f"using the language model {choice.model} ({choice.reason}): planner, implementer, compile fixer, "
                    "profile analyst and test synthesizer, with the built-in rule-based proposals tried first where they apply")
    return author, announcement


#: the sub-agents a model can be set for, by the environment variable MK_LM_<NAME> (e.g. MK_LM_COMPILE_FIXER)
AGENTS = ("planner", "implementer", "compile_fixer", "profile_analyst", "test_synthesizer", "tuning_space")


def agent_models(environ: Any = None) -> dict[str, str]:
    """The per-agent models the environment sets (``MK_LM_COMPILE_FIXER=gemini/gemini-2.5-flash`` gives the fixer
    a cheaper model; ``MK_LM_FIXER`` is accepted for it too); the other agents use the run's model."""
    import os

    env = os.environ if environ is None else environ
    out = {a: env[f"MK_LM_{a.upper()}"].strip() for a in AGENTS if env.get(f"MK_LM_{a.upper()}", "").strip()}
    if env.get("MK_LM_FIXER", "").strip() and "compile_fixer" not in out:
        out["compile_fixer"] = env["MK_LM_FIXER"].strip()
    return out


def prepare_suite(author: Any, task: Task, target: str) -> tuple[Task, Any]:
    """Freeze the suite before the first plan, with the author's synthesised cases: ``(task, suite)`` (see
    :func:`mk.run.service.freeze_suite`, which also returns what a resume needs to rebuild them)."""
    from mk.run.service import freeze_suite

    run_task, suite, _ = freeze_suite(as_author(author), task, target)
    return run_task, suite
