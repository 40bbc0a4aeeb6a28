"""The main job: optimise a task end to end and write the best kernel.

``optimize_task`` resolves the author (an LM, or the offline rule-based one), creates the run through
:class:`mk.run.Run`, drives the mode (:mod:`mk.programs.modes`) and writes the fastest correct kernel with a
provenance header plus a JSON report (:mod:`mk.run.output`).
"""

from __future__ import annotations

import logging
from pathlib import Path
from typing import Any, Callable

from mk.errors import ConfigError
from mk.run.output import Best, OptimizeReport, prepare_output_dir, with_provenance  # noqa: F401 - the job's public names
from mk.task import Task

log = logging.getLogger(__name__)


def resolve_author(lm: Any = None, *, store: Any = None, run_id: str | None = None, budget: Any = None,
                   explore: bool = False) -> tuple[Any, str]:
    """Return (author, announcement); see :func:`mk.authors.resolve_author`."""
    from mk.authors import resolve_author as _resolve

    return _resolve(lm, store=store, run_id=run_id, budget=budget, explore=explore)


def optimize_task(
    task: Task,
    *,
    target: str = "tpu",
    lm: Any = None,
    mode: str = "auto",
    iterations: int = 4,
    db: str | Path | None = None,
    out: str | Path | None = None,
    tune: bool = True,
    max_trials: int = 6,
    on_event: Callable[[str, dict[str, Any]], None] | None = None,
    budget: Any = None,
    search: dict[str, Any] | None = None,
    explore: bool = False,
) -> OptimizeReport:
    """Run the main job in ``mode`` ``auto`` (one trajectory) or ``search`` (``search`` holds the
    SearchConfig fields: algorithm, width, depth, branches, workers ...). ``budget``: a
    :class:`mk.budget.Budget` or BudgetMeter; ``lm``: see :func:`resolve_author`; ``explore``: without a device of
    the target, let an LM author go on after the first correct kernel."""
    from mk.budget import Budget, BudgetMeter
    from mk.run import Run, RunConfig
    from mk.run.config import author_fields
    from mk.programs.modes import drive
    from mk.run.output import write_outputs
    from mk.store import Store
    from mk.targets import get_target

    if mode not in ("auto", "search"):
        raise ConfigError(f"unknown mode {mode!r}", hint="use auto or search here; `mk hitl TASK` runs the interactive mode")
    get_target(target)
    meter = budget if isinstance(budget, BudgetMeter) or budget is None else BudgetMeter(budget)
    out_dir = prepare_output_dir(out)  # checked before the run, so a bad --out does not waste it
    with Store.open(db) as store:
        author, announcement = resolve_author(lm, store=store, budget=meter, explore=explore)
        if getattr(author, "spec", None) == "offline":
            from mk.author import covers

            log.info("the rule-based author's kernel families, in the order they are tried:\n%s", covers())
        notice = author.device_notice(target) if hasattr(author, "device_notice") else None
        if on_event:  # said before anything is spent
            on_event("author", {"announcement": announcement + (f"\n{notice}" if notice else "")})
            if notice:
                author.announced(target)
        settings = {}
        if mode == "search":
            from mk.programs.search import SearchConfig

            options = dict(search or {})
            fields = {"target": target, "iterations": max(1, min(iterations, options.pop("iterations", iterations))), "tune": tune,
                      "max_trials": max_trials, **options}
            settings = SearchConfig(**fields).to_dict()
        config = RunConfig(mode=mode, target=target, **author_fields(author), budget=meter.budget if meter else Budget(),
                           iterations=iterations, tune=tune, max_trials=max_trials, settings=settings, out=str(out_dir.resolve()),
                           explore=explore)
        run = Run.create(store, task, config, meter=meter)
        try:
            outcome = drive(run, author, meter=meter, on_event=on_event)
        except KeyboardInterrupt as stop:  # the run is marked; the best kernel so far and a report still go to --out
            from mk.run.restore import stored_outcome

            write_outputs(run, stored_outcome(run, "interrupted", str(stop)), out_dir, author=author.name)
            raise
        return write_outputs(run, outcome, out_dir, author=author.name)
