"""`mk bench SUITE`: run a suite with one or more methods and report the MaxKernel paper's metrics.

SUITE is ``jaxbench`` (the built-in 50 tasks), a MaxKernel-format dataset directory, a
directory of JAXBench ``baseline.py`` files, or a single task path. Exit code 0 when the
benchmark ran (whatever the metrics), 2 for usage errors.
"""

from __future__ import annotations

import argparse
import json
from typing import Any


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("bench", help="benchmark methods over a task suite: compile/correct rates, geomean speedup, fast_p",
                       description=__doc__)
    p.add_argument("suite", metavar="SUITE", nargs="?", default=None,
                   help="jaxbench, a MaxKernel dataset dir, a dir of JAXBench baseline.py files, or a task path")
    p.add_argument("--resume", metavar="BENCH_ID", default=None,
                   help="continue an interrupted (or killed) benchmark from the store: its suite, methods, tasks and "
                        "settings are its own; finished (task, method) pairs are kept, the rest run; budget flags apply anew")
    p.add_argument("--list", action="store_true",
                   help="list the benchmarks in the store (ids, state, rows recorded), newest first: 'running', 'killed' (its "
                        "process is gone: SIGKILL, a crash; resume it), 'interrupted', 'budget_spent' or 'finished'")
    p.add_argument("--scale", default="ci", help="run every task at this scale (default: ci); 'all' keeps every scale a task defines")
    p.add_argument("--mode", default="auto",
                   help="auto | search | best-of-n, or several separated by commas to compare them on the same tasks")
    p.add_argument("--lm", default=None, help="a DSPy model string, or 'offline' for the rule-based author")
    from mk.targets import target_names

    p.add_argument("--target", choices=target_names(), default="tpu", help="where the kernel will run (default: tpu)")
    p.add_argument("--tasks", default=None, help="comma-separated task ids or names (default: all)")
    p.add_argument("--iterations", type=int, default=4, help="auto/search: iterations per trajectory")
    p.add_argument("--samples", "-n", type=int, default=4, help="best-of-n: independent candidates per task")
    p.add_argument("--trials", type=int, default=6, help="auto: autotuning trials per candidate")
    p.add_argument("--no-tune", dest="tune", action="store_false", help="auto: skip autotuning")
    from mk.commands._flags import add_budget_flags
    from mk.programs.search_algorithms import ALGORITHMS

    p.add_argument("--search-algorithm", choices=list(ALGORITHMS), default="beam", help="search: the algorithm")
    p.add_argument("--depth", type=int, default=2, help="search: levels of the tree")
    p.add_argument("--width", type=int, default=2, help="search: nodes kept per level (beam) or trajectories (parallel)")
    p.add_argument("--db", default=None, help="DuckDB file (default: $MK_DB or ~/.mk/mk.duckdb)")
    p.add_argument("--out", default=None,
                   help="folder for report.md, results.json and the PNG plots (default: mk-bench; a resumed benchmark: its own)")
    p.add_argument("--no-plots", dest="plots", action="store_false", help="write the report without plots")
    p.add_argument("--json", action="store_true", help="print the metrics and per-task rows as JSON")
    p.add_argument("--repeats", type=int, default=3,
                   help="time each task's best kernels this many more times side by side, to tell methods from noise "
                        "(default 3; 0: no; only where the target can be timed)")
    add_budget_flags(p, "for the whole benchmark: ")
    p.set_defaults(func=run)


def _list(args: argparse.Namespace) -> int:
    """``mk bench --list``: every benchmark's id and state, with the command that continues an unfinished one. A
    benchmark stored as ``running`` whose process is gone shows ``killed`` (:func:`mk.store.shown_status`); while
    another process holds the store, the benchmarks' progress files (``<store>.benches/``) are listed instead."""
    from rich.table import Table

    from mk.bench.record import list_benches
    from mk.commands._console import console
    from mk.commands.runs import read_store
    from mk.errors import StoreLocked
    from mk.run.service import db_flag
    from mk.store import progress_folder, read_progress, resolve_path, shown_status

    try:
        with read_store(args.db) as store:
            rows = list_benches(store)
            progress = {p.get("id"): p for p in read_progress(store.bench_progress_dir)}
            where = db_flag(store.path)
        readable = True
    except StoreLocked as err:  # a benchmark (or another mk process) is writing: its progress files say where it is
        progress = {p.get("id"): p for p in read_progress(progress_folder(args.db, "benches"))}
        rows = sorted(progress.values(), key=lambda r: str(r.get("started_at")), reverse=True)[:30]
        if not rows:
            raise
        where, readable = db_flag(resolve_path(args.db)), False
        console(stderr=True).print(f"[yellow]the store is in use by another mk process ({err.message.split(' (')[0]}); "
                                   "showing what the benchmarks' progress files say (updated at every row and end)[/]")
    shown = []
    for r in rows:
        r = {k: v for k, v in r.items() if not k.startswith("writer_") and k != "updated_at"}
        status = shown_status(r["status"], progress.get(r["id"]), store_readable=readable)
        if status != r["status"]:  # shown, never written: the row stays 'running' until a resume continues it
            r["stored_status"], r["status"] = r["status"], status
        shown.append({**r, "resume": None if r["status"] == "finished" else f"mk bench --resume {r['id']}{where}"})
    rows = shown
    if args.json:
        print(json.dumps(rows, default=str))
        return 0
    table = Table("bench id", "suite", "target", "methods", "status", "rows", "started", "continue with")
    for r in rows:
        table.add_row(r["id"], str(r["suite"]), r["target"], ",".join(r.get("methods") or []), r["status"], str(r["rows"]),
                      str(r["started_at"])[:19], r["resume"] or "")
    console().print(table if rows else "no benchmarks in the store yet")
    return 0


def run(args: argparse.Namespace) -> int:
    from mk.commands._console import console as make_console

    from mk.bench import BenchConfig, run_bench
    from mk.commands._flags import budget_from

    console = make_console(stderr=True)
    if args.list:
        return _list(args)
    if not args.suite and not args.resume:
        from mk.errors import ConfigError

        raise ConfigError("mk bench needs a SUITE (or --resume BENCH_ID)", hint="e.g. `mk bench jaxbench --tasks 12p`")
    if args.suite and args.resume:
        from mk.errors import ConfigError

        raise ConfigError("give either a SUITE or --resume BENCH_ID, not both",
                          hint="a resumed benchmark runs its own suite, methods and tasks")
    methods = [m.strip() for m in args.mode.split(",") if m.strip()]
    cfg = BenchConfig(
        suite=args.suite, target=args.target, methods=methods, scale=None if args.scale == "all" else args.scale,
        tasks=[t.strip() for t in args.tasks.split(",") if t.strip()] if args.tasks else None, lm=args.lm,
        iterations=args.iterations, samples=args.samples, tune=args.tune, max_trials=args.trials, db=args.db, out=args.out or (None if args.resume else "mk-bench"),
        plots=args.plots, search={"algorithm": args.search_algorithm, "depth": args.depth, "width": args.width},
        budget=budget_from(args), repeats=max(0, args.repeats), resume=args.resume,
    )
    with _Progress(console) as progress:
        result = run_bench(cfg, on_event=progress.on_event)
    if args.json:
        print(json.dumps({"metrics": {m: _public(v.to_dict()) for m, v in result.metrics.items()},
                          "tasks": [_row(r) for r in result.rows], "bench_id": result.bench_id, "target": result.target,
                          "suite": result.suite, "scale": result.scale, "author": result.author,
                          "speed": None if result.can_time else result.speed_reason, "report": result.report_path},
                         default=str))
    else:
        _summary(make_console(), result)  # the summary is the command's output: stdout
    return 0


def _public(m: dict[str, Any]) -> dict[str, Any]:
    out = dict(m)
    if m["speed"] == "unmeasured":
        for k in ("geomean_speedup", "geomean_speedup_all", "fast_p"):
            out[k] = "not measured"
    return out


def _row(r: Any) -> dict[str, Any]:
    d = r.to_dict()
    d["progress"] = [{k: s[k] for k in ("step", "depth", "name", "status", "speedup")} for s in d["progress"]]
    return d


def _summary(console: Any, result: Any) -> None:
    from rich.table import Table

    from mk.bench.metrics import FAST_P

    table = Table("method", "compiled", "correct", "geomean (correct)", "geomean (all)",
                  "fast_p, p=" + "/".join(f"{p:g}" for p in FAST_P),
                  title=f"{result.suite} on {result.target} ({len({r.task for r in result.rows})} tasks)")
    for m, met in result.metrics.items():
        if met.speed == "unmeasured":
            speed = ["not measured"] * 3
        else:
            speed = [f"{v:.3f}x" if v is not None else "—" for v in (met.geomean_speedup, met.geomean_speedup_all)]
            speed.append(" / ".join(f"{100 * met.fast_p[f'fast_{p:g}']:.0f}%" for p in FAST_P))
        table.add_row(m, f"{100 * met.compilation_rate:.0f}%", f"{100 * met.correctness_rate:.0f}%", *speed)
    console.print(table)
    if any(r.spread is not None for r in result.rows):
        console.print("speedups: each task's re-timed median (the 're-timed' lines), not its first measurement")
    if not result.can_time:
        console.print(f"[yellow]{result.speed_reason}[/]")
    if result.stop_reason:
        console.print(f"[yellow]{result.stop_reason}[/]")
    console.print(f"report: {result.report_path}  bench id: {result.bench_id}")


class _Progress:
    """A rich progress bar over (task, method) pairs, with one line per finished task."""

    def __init__(self, console: Any):
        from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

        self.console = console
        self.progress = Progress(TextColumn("{task.description}"), BarColumn(), MofNCompleteColumn(), TimeElapsedColumn(),
                                 console=console, transient=True)
        self.bar = None

    def __enter__(self) -> "_Progress":
        self.progress.__enter__()
        return self

    def __exit__(self, *exc: Any) -> None:
        self.progress.__exit__(*exc)

    def on_event(self, kind: str, data: dict[str, Any]) -> None:
        if kind == "start":
            if data.get("announcement"):
                self.console.print(f"[bold]{data['announcement']}[/]")
            self.bar = self.progress.add_task("bench", total=data["tasks"] * len(data["methods"]))
        elif kind == "task_start" and self.bar is not None:
            self.progress.update(self.bar, description=f"{data['method']}: {data['task']}")
        elif kind == "task" and self.bar is not None:
            row = data["row"]
            colour = "green" if row.correct else ("yellow" if row.status == "declined" else "red")
            speed = f" {row.speedup:.2f}x" if row.speedup is not None else ""
            self.console.print(f"[{colour}]{row.status:>13}[/] {row.method:>9} {row.task}{speed} ({row.seconds:.1f}s)")
            self.progress.advance(self.bar)
        elif kind == "retimed":
            for line in retimed_lines(data["rows"]):
                self.console.print(line)


def retimed_lines(rows: Any) -> list[str]:
    """One line per re-timed row: the median the metrics use (its method's first measurement was printed before)."""
    out = []
    for row in rows:
        lo, hi = row.spread
        tie = f", tie with {', '.join(row.tied_with)}" if row.tied_with else ""
        out.append(f"{'re-timed':>13} {row.method:>9} {row.task} {row.speedup:.2f}x "
                   f"(median of {len(row.speedup_runs)} runs, {lo:.2f}x-{hi:.2f}x{tie})")
    return out
