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

import importlib
import logging
from pathlib import Path
from typing import Any

from mk.contracts import Adapted, Author, as_author, declined_reason  # noqa: F401 - mk.authors.Author, as before
from mk.errors import ConfigError, KnowledgeError
from mk.task import Task

log = logging.getLogger(__name__)


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
    # deferred: the offline author imports JAX and its templates, the LM accounting DSPy (an mk command that only
    # lists runs imports neither)
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


def build_author(spec: str, *, store: Any = None, run_id: str | None = None, budget: Any = None, name: str = "",
                 explore: bool = False) -> Any:
    """The author ``spec`` names, built afresh (an LM author's calls are recorded under ``run_id``)."""
    if not spec:
        raise ConfigError(f"the run's author {name or '(unnamed)'!r} cannot be rebuilt from the store (it was a Python object, "
                          "not a spec)", hint="resume it from Python and pass author= again, or start a new run")
    if spec.startswith("lm:"):  # the accounted LM author, its calls recorded under run_id
        author, _ = resolve_author(spec[3:], store=store, run_id=run_id, budget=budget, explore=explore)
        return author
    return make_author(spec)


def make_author(author: Any) -> Any:
    """An Author from a spec (``"offline"`` or ``"module:Factory"``), a factory (class or function), or an instance
    (its ``fork()`` where it has one, else a deep copy)."""
    if isinstance(author, str):
        if author == "offline":
            from mk.author.adapter import OfflineAuthorAdapter  # deferred: the offline author imports JAX and its templates

            return OfflineAuthorAdapter()
        if author.startswith("lm:"):  # mk's LM author over a model string (its calls are not stored from a worker)
            return resolve_author(author[3:])[0]
        module, _, attr = author.partition(":")
        if not module or not attr:
            raise ConfigError(f"cannot build an author from {author!r}",
                              hint="give 'offline' or an importable factory as 'package.module:Name'")
        try:
            obj: Any = importlib.import_module(module)
            for part in attr.split("."):
                obj = getattr(obj, part)
        except (ImportError, AttributeError) as exc:
            raise ConfigError(f"cannot import the author factory {author!r}: {exc}",
                              hint="make the module importable (PYTHONPATH) or pass author= explicitly") from exc
        return obj()
    if isinstance(author, type) or (callable(author) and not hasattr(author, "plan")):
        return author()
    from mk.contracts import as_author

    return as_author(author).fork()  # authors holding live resources (an LM client, a store) know how to start afresh
