"""The methods a benchmark compares, each run on one task and turned into a :class:`TaskRow`.

* ``auto`` – one closed-loop :class:`~mk.programs.auto.Auto` trajectory (plan, implement,
  validate + fix, test, autotune, profile; the judge's feedback goes into the next plan);
* ``best-of-n`` – the paper's baseline: N independent zero-shot candidates (empty history,
  no feedback, no fixes, no tuning), each judged by the same harness; the best is kept. An
  author with a ``rollout`` attribute (:class:`~mk.programs.lm_author.LMAuthor`) draws sample
  i as rollout i, so DSPy's response cache cannot hand every sample the same answer;
* ``search`` – :mod:`mk.programs.search` over Auto nodes, when that module is installed.

The author is asked for its first plan before the suite is frozen, so a task the author
declines costs no reference computation; the suite is still frozen before any candidate
is implemented or judged.
"""

from __future__ import annotations

import hashlib
import logging
import time
from dataclasses import dataclass, field
from typing import Any, Callable

from mk.bench.results import Step, TaskRow, best_step
from mk.errors import MkError
from mk.run.stop import budget_stop_reason, is_budget_stop
from mk.task import Task

log = logging.getLogger(__name__)

JUDGED = ("correct", "incorrect", "compile_error", "rejected", "timeout", "crashed", "unverifiable_here", "harness_error", "outside_envelope")


@dataclass
class MethodConfig:
    """Knobs shared by the methods, passed in explicitly by the runner."""

    target: str
    store: Any = None
    evaluate: Callable[..., Any] | None = None
    iterations: int = 4
    samples: int = 4
    tune: bool = True
    max_trials: int = 6
    max_fixes: int = 2
    measure: bool = True
    search: dict[str, Any] = field(default_factory=dict)
    on_event: Callable[[str, dict[str, Any]], None] | None = None
    #: the benchmark's BudgetMeter (None: unlimited), checked between phases, samples and search levels
    budget: Any = None
    #: the benchmark these runs belong to (kept in each task run's settings, so an interrupted one can be closed)
    bench_id: str | None = None

    def judge(self) -> Callable[..., Any]:
        if self.evaluate is not None:
            return self.evaluate
        from mk.harness.evaluate import evaluate

        return evaluate


class _Primed:
    """An author whose first plan was already made (before the suite was frozen)."""

    def __init__(self, author: Any, first: Any):
        self._author, self._first = author, first
        self.name = author.name

    def plan(self, ctx: Any) -> Any:
        if self._first is not None:
            first, self._first = self._first, None
            return first
        return self._author.plan(ctx)

    def __getattr__(self, item: str) -> Any:
        return getattr(self._author, item)


def _fresh_context(task: Task, target: str) -> Any:
    from mk.programs.auto import Context

    return Context(task, target, [], "")


def _declined(method: str, task: Task, author: Any, cfg: MethodConfig) -> TaskRow:
    """The author proposed nothing: a run (mode ``bench``, status ``declined``) that records why; no suite is built."""
    from mk.contracts import as_author

    why = as_author(author).declined or {}
    reason = ("the author made no proposal: " + "; ".join(f"{k}: {v}" for k, v in why.items())) if why else "the author made no proposal"
    run = _bench_run(task, author, cfg, method)
    if run is not None:
        run.finish("declined", reason)
    return TaskRow(method, task.name, "declined", reason, run_id=run.id if run is not None else None, fingerprint=task.fingerprint())


def _bench_run(task: Task, author: Any, cfg: MethodConfig, method: str, **settings: Any) -> Any:
    """The run (mode ``bench``) one method makes on one task, through the run service; None without a store."""
    if cfg.store is None:
        return None
    from mk.run import Run, RunConfig
    from mk.run.config import author_fields

    return Run.create(cfg.store, task, RunConfig(mode="bench", target=cfg.target, **author_fields(author),
                                                 iterations=cfg.iterations, tune=cfg.tune, max_trials=cfg.max_trials,
                                                 max_fixes=cfg.max_fixes,
                                                 settings={"method": method, "bench": cfg.bench_id, **settings}))


def compiled_of(result: Any) -> bool:
    """Did this verdict get through the harness's compile step?"""
    if result is None:
        return False
    step = result.step("compile") if hasattr(result, "step") else None
    if step is not None and step.ok is not None:
        return bool(step.ok)
    return result.status in ("correct", "incorrect")


def _summarise(row: TaskRow, steps: list[Step], results: list[Any]) -> TaskRow:
    """Fill the row's verdict from its judged candidates: best correct (fastest measured), else the furthest-got failure."""
    row.progress = steps
    row.candidates = len(steps)
    row.compiled = any(s.compiled for s in steps)
    best = best_step(steps)
    row.correct = best is not None and best.status == "correct"
    if row.correct:
        row.status, row.reason, row.speedup, row.best = "correct", best.reason, best.speedup, best.name
        if best.speedup is None:
            res = next(r for s, r in zip(steps, results) if s is best)
            timing = getattr(res, "timing", None) if res is not None else None
            row.timing_note = timing.reason if timing is not None and timing.reason else "speed not measured"
    elif best is not None:
        row.status, row.reason, row.best = best.status, best.reason, best.name
    return row


# --- auto --------------------------------------------------------------------------------------------------
def run_auto(task: Task, author: Any, cfg: MethodConfig) -> TaskRow:
    from mk.harness.suite import build_suite
    from mk.programs.auto import Auto

    t0 = time.perf_counter()
    first = author.plan(_fresh_context(task, cfg.target))
    if first is None:
        return _declined("auto", task, author, cfg)
    auto = Auto(_Primed(author, first), target=cfg.target, iterations=cfg.iterations, evaluate=cfg.judge(), store=cfg.store,
                tune=cfg.tune, max_trials=cfg.max_trials, max_fixes=cfg.max_fixes, on_event=cfg.on_event, budget=cfg.budget)
    run = _bench_run(task, author, cfg, "auto")
    traj = auto.start(task, run=run) if run is not None else auto.start(task, suite=build_suite(task))
    while not traj.done:
        auto.step(traj)
    steps = [Step(s.iteration, s.iteration, s.proposal, s.status, compiled_of(s.result), s.speedup, s.reason) for s in traj.snapshots]
    row = TaskRow("auto", task.name, "declined", traj.stop_reason, run_id=traj.run_id, fingerprint=task.fingerprint())
    row = _summarise(row, steps, [s.result for s in traj.snapshots])
    if not steps:
        row.reason = traj.stop_reason
        if is_budget_stop(traj.stop_reason):  # not the author declining: the benchmark's budget ran out
            row.status = "skipped"
    row.seconds = time.perf_counter() - t0
    return row


# --- best-of-n ---------------------------------------------------------------------------------------------
def run_best_of_n(task: Task, author: Any, cfg: MethodConfig) -> TaskRow:
    """N independent zero-shot candidates: each plan sees an empty history and no feedback; no fixes, no tuning."""
    samples = hasattr(author, "rollout")
    original = getattr(author, "rollout", None)
    try:
        return _best_of_n(task, author, cfg, samples)
    finally:
        if samples:
            author.rollout = original


def _best_of_n(task: Task, author: Any, cfg: MethodConfig, samples: bool) -> TaskRow:
    from mk.candidate import Candidate
    from mk.errors import CandidateError
    from mk.harness.suite import build_suite

    def sample(i: int) -> None:  # sample i's LM calls are rollout i: their own draws, not cache hits of sample 1's
        if samples:
            author.rollout = i

    t0 = time.perf_counter()
    evaluate = cfg.judge()
    sample(1)
    first = author.plan(_fresh_context(task, cfg.target))
    if first is None:
        return _declined("best-of-n", task, author, cfg)
    store, run_id = cfg.store, None
    run = _bench_run(task, author, cfg, "best-of-n", samples=cfg.samples)
    if run is not None:
        task, suite = run.freeze(author)
        run_id = run.id
    else:
        suite = build_suite(task)
    steps: list[Step] = []
    results: list[Any] = []
    plan = first
    spent = None
    for i in range(1, cfg.samples + 1):
        spent = cfg.budget.exceeded() if cfg.budget is not None else None
        if spent:
            break
        sample(i)
        if plan is None:
            plan = author.plan(_fresh_context(task, cfg.target))
            if plan is None:
                break
        res, name = None, plan.name
        try:
            proposal = author.implement(_fresh_context(task, cfg.target), plan)
            name, source = proposal.name, proposal.source
            candidate = Candidate.from_source(source)
        except (CandidateError, MkError) as exc:
            status, reason, source = "rejected", f"the author could not produce a loadable candidate: {exc}", ""
        else:
            res = evaluate(task, candidate, target=cfg.target, suite=suite, measure=cfg.measure, config={})
            status, reason = res.status, res.reason
        step = Step(i, 0, name, status, compiled_of(res), res.speedup if res is not None and status == "correct" else None, reason,
                    digest=hashlib.sha256(source.encode()).hexdigest()[:16] if source else "")
        steps.append(step)
        results.append(res)
        if cfg.on_event:
            cfg.on_event("snapshot", {"iteration": i, "status": status, "reason": reason, "speedup": step.speedup})
        if store is not None:
            node = store.add_node(run_id, None, code=source, plan=plan.text, code_hash=hashlib.sha256(source.encode()).hexdigest()[:16],
                                  status=status, reason=reason, speedup=step.speedup, depth=0, meta={"sample": i, "name": name})
            if res is not None:
                store.record_evaluation(run_id=run_id, node_id=node, task_name=task.name, status=status, reason=reason,
                                        suite_hash=suite.hash, speedup=step.speedup, result_json=res.model_dump_json())
        plan = None
    row = _summarise(TaskRow("best-of-n", task.name, "declined", run_id=run_id, fingerprint=task.fingerprint()), steps, results)
    if run is not None:
        best = f"; best: {row.best} ({row.speedup:.2f}x)" if row.correct and row.speedup is not None else (
            f"; best: {row.best} (speed not measured)" if row.correct else "")
        why = (budget_stop_reason(cfg.budget, None, then=f"stopped after {len(steps)} of {cfg.samples} samples", fallback=spent) if spent
               else f"{len(steps)} independent samples")
        run.finish("correct" if row.correct else "no_correct_candidate", why + best)
    row.seconds = time.perf_counter() - t0
    return row


# --- search ------------------------------------------------------------------------------------------------
def run_search(task: Task, author: Any, cfg: MethodConfig) -> TaskRow:
    """:class:`mk.programs.search.Search` (inline workers) over Auto nodes; ``author`` must be a factory here,
    since the search builds one author per node."""
    from mk.programs.search import Search, SearchConfig
    from mk.programs.search_workers import author_spec

    t0 = time.perf_counter()
    probe = author()
    if probe.plan(_fresh_context(task, cfg.target)) is None:
        return _declined("search", task, probe, cfg)
    options = {"algorithm": "beam", "width": 2, "depth": 2, "branches": 2, "iterations": 1, **cfg.search}
    scfg = SearchConfig(target=cfg.target, tune=cfg.tune, max_trials=cfg.max_trials, max_fixes=cfg.max_fixes, workers="inline",
                        **options)
    spec = author_spec(probe)
    search = Search(spec if spec == "offline" else author, config=scfg, evaluate=cfg.evaluate, store=cfg.store,
                    on_event=cfg.on_event, budget=cfg.budget)
    result = search.run(task)
    compiled_runs = _compiled_nodes(cfg.store, result.run_id)
    steps = [Step(i + 1, n.depth, n.plan or n.key, n.status, n.node_id in compiled_runs if compiled_runs is not None
                  else n.status in ("correct", "incorrect"), n.speedup if n.status == "correct" else None, n.reason)
             for i, n in enumerate(sorted(result.nodes, key=lambda n: n.depth))]
    row = TaskRow("search", task.name, "declined", result.stop_reason, run_id=result.run_id, fingerprint=task.fingerprint())
    row = _summarise(row, steps, [None] * len(steps))
    row.seconds = time.perf_counter() - t0
    return row


def _compiled_nodes(store: Any, run_id: str) -> set[str] | None:
    """Ids of the run's nodes with at least one evaluation that passed the compile step (None without a store)."""
    if store is None:
        return None
    from mk.harness.results import EvalResult

    out = set()
    for r in store.query("SELECT node_id, result FROM evaluations WHERE run_id = ?", [run_id]):
        if r["node_id"] and r["result"] and compiled_of(EvalResult.model_validate(r["result"])):
            out.add(r["node_id"])
    return out


RUNNERS: dict[str, Callable[[Task, Any, MethodConfig], TaskRow]] = {"auto": run_auto, "best-of-n": run_best_of_n, "search": run_search}
