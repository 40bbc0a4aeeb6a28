"""Run a benchmark: every task of a suite, one or more methods, metrics, store rows and a report.

``run_bench(suite, ...)`` resolves the suite (``"jaxbench"`` for the built-in suite, a
MaxKernel-format dataset directory, a directory of JAXBench ``baseline.py`` files, or any
single task path), runs each method on each task with a fresh author per (method, task),
and records everything: each task run as a ``runs`` row with mode ``bench`` (its nodes,
snapshots and evaluations as usual), each (method, task) as a ``bench_results`` row and the
invocation with its metrics as a ``bench_runs`` row. A task that fails to load or crashes
is a row with status ``error`` (not compiled, not correct), never an aborted benchmark.
"""

from __future__ import annotations

import logging
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, Sequence

from mk.bench.metrics import compute_metrics
from mk.bench.methods import RUNNERS, MethodConfig
from mk.bench.results import METHODS, BenchResult, TaskRow
from mk.errors import ConfigError, MkError
from mk.run.service import db_flag
from mk.run.stop import budget_stop_reason

log = logging.getLogger(__name__)


@dataclass
class BenchConfig:
    """What to run. ``author_factory`` (for tests and callers with their own author) overrides ``lm``."""

    suite: str
    target: str = "tpu"
    methods: Sequence[str] = ("auto",)
    scale: str | None = "ci"
    tasks: Sequence[str] | None = None
    lm: Any = None
    iterations: int = 4
    samples: int = 4
    tune: bool = True
    max_trials: int = 6
    measure: bool = True
    db: str | Path | None = None
    out: str | Path | None = None
    plots: bool = True
    author_factory: Callable[[], Any] | None = None
    evaluate: Callable[..., Any] | None = None
    search: dict[str, Any] = field(default_factory=dict)  # SearchConfig options: algorithm, width, depth, branches
    extra: dict[str, Any] = field(default_factory=dict)
    #: one budget for the whole benchmark (LM calls, cost, wall time): checked between tasks and inside every method
    budget: Any = None
    #: times each task's best kernels are timed again side by side (mk.bench.noise; 0: not), where timing is possible
    repeats: int = 3
    #: a stored benchmark's id (or a unique prefix) to continue: its suite, target, scale, methods, tasks and settings
    #: are its own; the (task, method) pairs it finished are kept, the rest run (one cut short runs again)
    resume: str | None = None


def resolve_author_factory(lm: Any, store: Any = None, budget: Any = None) -> tuple[Callable[[], Any], str]:
    """A factory for fresh authors (one per task and method) and the announcement to show once.

    Uses ``mk.authors.resolve_author`` (LM or offline; LM calls are accounted in ``store``) where
    installed, else the offline author via ``mk.job.resolve_author``."""
    try:
        from mk.authors import resolve_author  # type: ignore[import-not-found]

        def make() -> tuple[Any, str]:
            return resolve_author(lm, store=store, budget=budget)
    except ImportError:
        from mk.job import resolve_author as _offline

        def make() -> tuple[Any, str]:
            return _offline(lm)
    _, announcement = make()
    return (lambda: make()[0]), announcement


def select_refs(suite: str, wanted: Sequence[str] | None) -> list[Any]:
    """The task references of ``suite``, filtered by ``wanted`` (ids or names, or a numeric prefix like ``12p``)."""
    from mk.loaders import discover

    refs = discover(suite)
    if not wanted:
        return refs
    picked, missing = [], []
    for w in wanted:
        hit = [r for r in refs if w in (r.id, r.name) or r.name.split("_", 1)[0] == w]
        (picked.extend(h for h in hit if h not in picked) if hit else missing.append(w))
    if missing:
        import difflib

        close = sorted({c for m in missing for c in difflib.get_close_matches(m, [r.name for r in refs], n=3, cutoff=0.4)})
        raise ConfigError(f"no task in {suite!r} matches {', '.join(missing)}",
                          hint=("close matches: " + ", ".join(close)) if close else "run `mk tasks` to list the task ids")
    return picked


def run_bench(cfg: BenchConfig, *, on_event: Callable[[str, dict[str, Any]], None] | None = None) -> BenchResult:
    """Run the benchmark described by ``cfg`` and return metrics and rows (the report is written when ``cfg.out`` is set)."""
    from mk.store import Store
    from mk.targets import get_target

    emit = on_event or (lambda kind, data: None)
    kept: list[TaskRow] = []
    if cfg.resume:
        cfg, kept = _resumed(cfg)
    methods = list(dict.fromkeys(cfg.methods))
    bad = [m for m in methods if m not in METHODS]
    if bad:
        raise ConfigError(f"unknown benchmark method(s) {bad}", hint=f"choose from {', '.join(METHODS)}")
    tgt = get_target(cfg.target)
    can_time = bool(cfg.measure and tgt.can_time())
    speed_reason = "" if can_time else (
        "speed not measured: timing was switched off" if not cfg.measure else
        f"speed not measured: no {cfg.target.upper()} device here (correctness ran in {tgt.mode()} mode, compile checks by lowering)")
    refs = select_refs(cfg.suite, cfg.tasks)
    if cfg.out:  # checked before the benchmark, so an unwritable folder does not waste it
        from mk.job import prepare_output_dir

        prepare_output_dir(cfg.out)
    rows: list[TaskRow] = list(kept)
    interrupted = False
    from mk.budget import BudgetMeter

    meter = None if cfg.budget is None else cfg.budget if isinstance(cfg.budget, BudgetMeter) else BudgetMeter(cfg.budget)
    with Store.open(cfg.db) as store:
        if cfg.author_factory is not None:
            factory, announcement = cfg.author_factory, ""
        else:
            factory, announcement = resolve_author_factory(cfg.lm, store, meter)
        author_name = getattr(factory(), "name", "author")
        emit("start", {"tasks": len(refs), "methods": methods, "announcement": announcement, "author": author_name})
        from mk.bench.record import create_bench, finish_bench

        config = {"iterations": cfg.iterations, "samples": cfg.samples, "tune": cfg.tune, "max_trials": cfg.max_trials,
                  "tasks": list(cfg.tasks or []), "measure": cfg.measure, "repeats": cfg.repeats, "plots": cfg.plots,
                  "out": str(cfg.out) if cfg.out else None, "lm": cfg.lm if isinstance(cfg.lm, str) or cfg.lm is None else None,
                  **({"search": cfg.search} if "search" in methods else {}), **cfg.extra}
        if cfg.resume:
            from mk.bench.record import close_task_runs, reopen_bench

            bench_id = cfg.resume
            close_task_runs(store, bench_id, "cut short when its benchmark stopped; the resumed benchmark runs this task again")
            reopen_bench(store, bench_id)
        else:
            bench_id = create_bench(store, cfg.suite, cfg.target, cfg.scale, methods, author_name, config)
        mcfg = MethodConfig(cfg.target, store=store, evaluate=cfg.evaluate, iterations=cfg.iterations, samples=cfg.samples,
                            tune=cfg.tune, max_trials=cfg.max_trials, measure=cfg.measure, search=dict(cfg.search), budget=meter,
                            bench_id=bench_id)
        try:
            _run_tasks(refs, methods, cfg, factory, mcfg, store, bench_id, rows, emit, {(r.task, r.method) for r in kept})
        except KeyboardInterrupt:  # keep what was measured: a partial report, the bench marked interrupted
            interrupted = True
            from mk.bench.record import close_task_runs

            close_task_runs(store, bench_id, f"interrupted with its benchmark; continue it with: mk bench --resume {bench_id}")
            log.info("bench %s interrupted after %d rows; writing a partial report", bench_id, len(rows))
        metrics = {m: compute_metrics([r.outcome() for r in rows if r.method == m], can_time=can_time, unmeasured_reason=speed_reason)
                   for m in methods}
        spent = meter.exceeded() if meter is not None else None
        stop = budget_stop_reason(meter, f"mk bench --resume {bench_id}{db_flag(store.path)}", fallback=spent,
                                  then=f"{sum(r.status == 'skipped' for r in rows)} task runs skipped or cut short") if spent else ""
        if interrupted:  # the report says it is partial, not only the command line
            stop = (f"interrupted after {len(rows)} of {len(refs) * len(methods)} (task, method) pairs; this report is partial; "
                    f"continue it with: mk bench --resume {bench_id}")
        finish_bench(store, bench_id, metrics, "interrupted" if interrupted else "budget_spent" if spent else "finished")
    result = BenchResult(bench_id, cfg.suite, cfg.target, cfg.scale, methods, author_name, can_time, speed_reason, metrics, rows,
                         config=config, stop_reason=stop)
    if cfg.out:
        from mk.bench.report import write_report

        write_report(result, Path(cfg.out), plots=cfg.plots)
    if interrupted:
        raise BenchInterrupted(bench_id, result, cfg.db)
    return result


class BenchInterrupted(KeyboardInterrupt):
    """Ctrl-C during a benchmark: ``result`` holds the rows measured so far (already recorded and reported)."""

    def __init__(self, bench_id: str, result: "BenchResult", db: str | Path | None = None):
        where = f"partial report: {result.report_path}" if result.report_path else "its rows are kept in the store"
        from mk.run.service import db_flag

        super().__init__(f"bench {bench_id} interrupted after {len(result.rows)} rows; {where}; continue it with: "
                         f"mk bench --resume {bench_id}{db_flag(db)}")
        self.bench_id, self.result = bench_id, result


def _resumed(cfg: BenchConfig) -> tuple[BenchConfig, list[TaskRow]]:
    """``cfg`` as the stored benchmark ``cfg.resume`` was run (its id resolved) and the rows it finished (a
    budget-skipped row runs again)."""
    import dataclasses

    from mk.bench.record import RESUMED, load_bench
    from mk.store import Store

    with Store.open(cfg.db) as store:
        bench, rows = load_bench(store, cfg.resume or "")
    if bench["status"] == "finished":
        raise ConfigError(f"benchmark {bench['id']} already finished", hint=f"its report: {bench['config'].get('out') or 'the --out folder'}")
    stored = bench["config"] or {}
    given = {k: stored[k] for k in RESUMED if k in stored and not (k == "lm" and cfg.author_factory is not None)}
    if cfg.out:  # the caller names another report folder
        given.pop("out", None)
    new = dataclasses.replace(cfg, suite=bench["suite"], target=bench["target"], scale=bench["scale"], methods=tuple(bench["methods"]),
                              tasks=stored.get("tasks") or None, resume=bench["id"], **given)
    kept = [r for r in rows if r.status != "skipped"]
    log.info("resuming bench %s: %d of its (task, method) pairs were finished", bench["id"], len(kept))
    return new, kept


def _run_tasks(refs: list[Any], methods: list[str], cfg: BenchConfig, factory: Callable[[], Any], mcfg: MethodConfig,
               store: Any, bench_id: str, rows: list[TaskRow], emit: Callable[[str, dict[str, Any]], None],
               done: set[tuple[str, str]] = frozenset()) -> None:
    """Each task x method, each row recorded as soon as it is measured (``rows`` grows in place); the (task name,
    method) pairs in ``done`` (a resumed benchmark's) are not run again."""
    from mk.bench.record import record_row
    from mk.loaders import load_ref

    all_methods = methods
    timeable = bool(cfg.repeats and mcfg.measure and _can_time(cfg.target))
    for ref in refs:
        methods = [m for m in all_methods if (ref.name, m) not in done]
        # a resumed benchmark's rows of this task that its noise step never re-timed (stopped before or during it)
        untimed = [r for r in rows if r.task == ref.name and r.correct and r.speedup is not None and r.spread is None]
        if not methods and not (timeable and untimed):
            continue
        task = None
        try:
            task = load_ref(ref)
            if cfg.scale:
                task = task.with_scales({cfg.scale: task.scale(cfg.scale)})
        except MkError as exc:
            for m in methods:
                rows.append(_error_row(m, ref.name, f"the task could not be loaded: {exc}"))
                record_row(store, bench_id, rows[-1])
                emit("task", {"row": rows[-1]})
            continue
        for m in methods:
            spent = mcfg.budget.exceeded() if mcfg.budget is not None else None
            if spent:  # the benchmark's budget is spent: the rest are recorded as skipped, not run
                rows.append(TaskRow(m, task.name, "skipped", f"not run: {budget_stop_reason(mcfg.budget, None, fallback=spent)}",
                                    fingerprint=task.fingerprint()))
                record_row(store, bench_id, rows[-1])
                emit("task", {"row": rows[-1]})
                continue
            emit("task_start", {"task": task.name, "method": m})
            t0 = time.perf_counter()
            mcfg.on_event = lambda kind, data, _t=task.name, _m=m: emit(kind, {**data, "task": _t, "method": _m})
            try:
                row = RUNNERS[m](task, factory if m == "search" else factory(), mcfg)
            except ConfigError:
                raise
            except Exception as exc:  # one task's failure is data, not the end of the benchmark
                log.exception("bench: %s on %s failed", m, task.name)
                row = _error_row(m, task.name, f"{type(exc).__name__}: {exc}")
                row.fingerprint = task.fingerprint()
            row.seconds = row.seconds or time.perf_counter() - t0
            rows.append(row)
            record_row(store, bench_id, row)
            emit("task", {"row": row})
        # every row of this task, a resumed benchmark's kept ones too: they are timed beside the new ones
        mine = [r for r in rows if r.task == task.name]
        if cfg.repeats and sum(r.correct and r.speedup is not None for r in mine) >= 1:
            from mk.bench.noise import retime

            retime(task, mine, store=store, target=cfg.target, evaluate=mcfg.judge(), repeats=cfg.repeats)
            for r in mine:
                record_row(store, bench_id, r)
            # the medians the metrics are computed from replace each row's first measurement: say so
            if any(r.spread is not None for r in mine):
                emit("retimed", {"task": task.name, "rows": [r for r in mine if r.spread is not None]})


def _can_time(target: str) -> bool:
    from mk.targets import get_target

    return get_target(target).can_time()


def _error_row(method: str, task: str, reason: str) -> TaskRow:
    return TaskRow(method, task, "error", reason)
