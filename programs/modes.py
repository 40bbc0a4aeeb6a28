"""Driving a run in its mode, the same way when it starts and when it is resumed: the loops of :mod:`mk.programs`
(Auto, the search, the HITL session's skips) over the run service :mod:`mk.run`.

:func:`drive` runs an ``auto`` or ``search`` run to its end and returns its :class:`~mk.run.service.Outcome`;
:func:`resume` reopens a stored run (its exact :class:`~mk.run.config.RunConfig`, author rebuilt from its spec,
suite checked) and drives what is left. Faults end here: Ctrl-C marks the run ``interrupted`` with the exact
resume command; a model that cannot be used at all marks it ``failed`` and raises a typed error; a model that
fails after its retries ends the trajectory ``failed`` with the best kernel so far kept (see ``Auto.step``).
"""

from __future__ import annotations

import logging
from typing import Any, Callable

from mk.authors import build_author, resolve_author
from mk.contracts import as_author
from mk.errors import ConfigError, ModelFailed
from mk.run.config import author_spec
from mk.run.output import Best
from mk.run.restore import outcome_of, restore_snapshots
from mk.run.service import Outcome, Run

log = logging.getLogger(__name__)

Events = Callable[[str, dict[str, Any]], None] | None


def drive(run: Run, author: Any, *, meter: Any = None, on_event: Events = None, snapshots: list[Any] | None = None) -> Outcome:
    """Run ``run`` (mode ``auto`` or ``search``) to its end with ``author``; ``snapshots`` continue an auto run."""
    try:
        if run.config.mode == "search":
            return _search(run, author, meter, on_event)
        if run.config.mode in ("auto", "hitl"):
            return _auto(run, author, meter, on_event, snapshots)
        raise ConfigError(f"a {run.config.mode!r} run is not driven here", hint="mk bench runs its own methods")
    except Exception as exc:
        from mk.lm import lm_failed

        unusable = unusable_lm(exc)
        if unusable is not None:
            run.fail(f"the language model cannot be used: {str(exc).splitlines()[0][:300]}")
            raise unusable from None
        if not lm_failed(exc):
            run.fail_unstarted(exc)
            raise
        # a provider failure outside Auto's steps (the author's test synthesis while the suite is frozen): the run
        # is marked, not left 'running', and the message says how to continue
        why = f"the language model failed after its retries ({type(exc).__name__}: {str(exc).splitlines()[0][:300]})"
        run.fail(why)
        raise ModelFailed(f"run {run.id} failed: {why}",
                          hint=f"nothing was lost; once the provider answers, continue it with: {run.resume_command()}") from None


def _auto(run: Run, author: Any, meter: Any, on_event: Events, snapshots: list[Any] | None) -> Outcome:
    # deferred (here and in _search): the loops import JAX and the offline author's templates, which `mk resume`'s
    # early refusals (an unknown run, a bench run, an unusable --out) do not need
    from mk.programs.auto import Attempt, Auto
    from mk.programs.session import SkipTried

    cfg = run.config
    author = as_author(SkipTried(author, [s.proposal for s in snapshots]) if snapshots else author)
    auto = Auto(author, target=cfg.target, iterations=cfg.iterations, store=run.store, tune=cfg.tune, max_trials=cfg.max_trials,
                max_fixes=cfg.max_fixes, budget=meter if meter is not None else author.meter, on_event=on_event)
    try:
        traj = auto.start(run.task, run=run)
        if snapshots:
            traj.snapshots = list(snapshots)
            traj.parent = next((s.node_id for s in reversed(snapshots) if s.node_id), None)
            traj.attempt = Attempt(max(s.iteration for s in snapshots) + 1)
        while not traj.done:
            auto.step(traj)
    except KeyboardInterrupt:  # keep what was written, and say so in the run's row instead of leaving it 'running'
        raise run.interrupt(f"its snapshots and trials are kept (mk show {run.id})") from None
    return outcome_of(traj, author)


def _search(run: Run, author: Any, meter: Any, on_event: Events) -> Outcome:
    from mk.programs.search import Search, SearchConfig

    cfg = SearchConfig.from_dict({**run.config.settings, "target": run.config.target})
    offline = getattr(author, "name", author) == "offline"
    if not offline and not author_spec(author) and cfg.workers != "inline":
        # an author that cannot be rebuilt in another process (a live client, no spec) plans and runs here
        log.warning("the %s author cannot be rebuilt in a worker process; its search nodes run inline", getattr(author, "name", "?"))
        cfg = SearchConfig.from_dict({**cfg.to_dict(), "workers": "inline"})
    search = Search("offline" if offline else author, config=cfg, store=run.store, on_event=on_event,
                    budget=meter if meter is not None else getattr(author, "meter", None))  # a spec string has no meter
    result = search.run(run.task, run=run)
    n = result.best
    best = Best(n.code, n.status, n.speedup, n.plan or n.key, dict(n.config), n.plan) if n else None
    rows = [{"node": x.key, "depth": x.depth, "status": x.status, "reason": x.reason, "speedup": x.speedup} for x in result.nodes]
    return Outcome(run.id, result.status, result.stop_reason, best, rows, best_node=n.key if n else None)


def resume(store: Any, ident: str, *, lm: Any = None, author: Any = None, budget: Any = None, on_event: Events = None,
           settings: dict[str, Any] | None = None, task: Any = None) -> tuple[Run, Outcome]:
    """Continue the stored run ``ident`` in its own mode with its own config (``settings`` override search settings,
    ``budget`` is a new :class:`mk.budget.Budget` for what is left). ``lm`` / ``author`` replace the stored author."""
    from mk.budget import BudgetMeter
    run = Run.reopen(store, ident, task=task)
    if run.config.mode == "bench":
        bench = (run.config.settings or {}).get("bench")
        raise ConfigError(f"run {run.id} is one method of a benchmark on one task",
                          hint=f"continue its benchmark with: mk bench --resume {bench}" if bench else
                          "run `mk bench` again; its finished tasks are in its report")
    meter = BudgetMeter(budget) if budget is not None else None
    if author is None:
        if lm is not None:
            author, _ = resolve_author(lm, store=store, run_id=run.id, budget=meter, explore=run.config.explore)
        else:
            author = build_author(run.config.author, store=store, run_id=run.id, budget=meter, name=run.config.author_name,
                                  explore=run.config.explore)
    changes: dict[str, Any] = {}
    if budget is not None:
        changes["budget"] = budget
    if settings:
        changes["settings"] = {**run.config.settings, **settings}
    if changes:
        run.set_config(**changes)
    run.restart()
    if run.config.mode == "search":
        return run, drive(run, author, meter=meter, on_event=on_event)
    snapshots = restore_snapshots(store, run.id)
    return run, drive(run, author, meter=meter, on_event=on_event, snapshots=snapshots)


def unusable_lm(exc: BaseException) -> ConfigError | None:
    """A ConfigError saying what to do when ``exc`` means the LM cannot be used at all (no key, bad key, no
    billing), else None. Transient LM errors (rate limits, timeouts) are not this."""
    try:
        from dspy.utils.exceptions import (LMAuthError, LMBillingError, LMConfigurationError, LMInvalidRequestError,
                                           LMUnsupportedModelError)
    except ImportError:  # pragma: no cover - another DSPy version
        return None
    if not isinstance(exc, (LMAuthError, LMBillingError, LMConfigurationError, LMUnsupportedModelError)) and not (
            isinstance(exc, LMInvalidRequestError) and "model" in str(exc).lower()):
        return None
    return ConfigError(f"the language model cannot be used: {str(exc).splitlines()[0]}",
                       hint="set the provider's API key (e.g. GEMINI_API_KEY), pick another --lm, or use --lm offline")
