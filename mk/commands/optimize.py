"""`mk optimize TASK`: run the main job and write the best kernel."""

from __future__ import annotations

import argparse
import contextlib
import json
from typing import Any

from mk.commands._flags import add_budget_flags, add_explore_flag, budget_from, non_negative_int, positive_int


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("optimize", help="optimise a task: plan, write, verify, tune and keep the fastest correct kernel")
    p.add_argument("task", help="an mk task module, a MaxKernel task dir, a JAXBench baseline.py or jaxbench:<id>")
    p.add_argument("--mode", choices=["auto", "hitl", "search"], default="auto",
                   help="auto: one closed-loop trajectory; hitl: pause after every phase (as `mk hitl`); search: many trajectories")
    from mk.programs.search_algorithms import ALGORITHMS

    p.add_argument("--algorithm", choices=list(ALGORITHMS), default="beam",
                   help="search algorithm (--mode search): " + "; ".join(f"{n}: {a.summary}" for n, a in ALGORITHMS.items()))
    p.add_argument("--width", type=int, default=2, help="search: beam width / number of parallel trajectories")
    p.add_argument("--depth", type=int, default=2, help="search: levels below the root")
    p.add_argument("--branches", type=int, default=2, help="search: children per expanded node")
    p.add_argument("--workers", choices=["process", "inline", "ray"], default="process", help="search: where nodes run")
    p.add_argument("--lm", default=None, help="a DSPy model string, or 'offline' for the rule-based author")
    from mk.targets import target_names

    p.add_argument("--target", choices=target_names(), default="tpu", help="where the kernel will run (default: tpu)")
    p.add_argument("--scale", default=None, help="restrict the task to this scale (default: every scale it defines)")
    p.add_argument("--iterations", type=positive_int, default=4, help="plan-implement-test rounds (at least 1; default 4)")
    p.add_argument("--trials", type=non_negative_int, default=6, help="autotuning trials per candidate (0: no tuning)")
    p.add_argument("--db", default=None, help="DuckDB file (default: $MK_DB or ~/.mk/mk.duckdb)")
    p.add_argument("--out", default="mk-out", help="folder for the kernel and the JSON report")
    p.add_argument("--json", action="store_true", help="print status, run_id, kernel_path, speedup as JSON")
    add_explore_flag(p)
    add_budget_flags(p)
    p.set_defaults(func=run)


def trial_figure(data: dict[str, Any]) -> str:
    """A tuning trial's time: measured on the device, or the compiler's estimate, labelled as one."""
    if data.get("seconds"):
        return f", {data['seconds'] * 1e6:.1f} us measured"
    if data.get("estimated_s"):
        return f", {data['estimated_s'] * 1e6:.1f} us estimated for {data.get('estimated_at') or 'the chip'} (an estimate)"
    return ""


def progress_printer(console: Any) -> Any:
    """The ``on_event`` callback every long command prints its progress with (one line per event)."""

    def on_event(kind: str, data: dict[str, Any]) -> None:
        if kind == "author":
            console.print(f"[bold]{data['announcement']}[/]")
        elif kind == "suite":
            console.print(f"frozen suite {data['hash']}: {data['cases']} cases")
        elif kind == "proposal":
            console.print(f"[cyan]iteration {data['iteration']}[/]: {data['name']} — {data['rationale']}")
        elif kind == "trial":
            from mk.harness.results import trial_status

            status = trial_status(data["status"], str(data.get("reason", "")))
            console.print(f"  trial {data['params']}: {status}" + (f" ({data['reason']})" if data["status"] != "correct" else "")
                          + trial_figure(data))
        elif kind == "search":
            console.print(f"search run {data['run_id']} ({data['algorithm']}; {data['resumed_nodes']} nodes already done)")
        elif kind == "level":
            console.print(f"[cyan]depth {data['depth']}[/]: {data['nodes']} node(s)")
        elif kind == "node":
            sp = f", speedup {data['speedup']:.2f}x" if data.get("speedup") else ""
            console.print(f"  node {data['key']}: {data['status']}{sp}")
        elif kind == "snapshot":
            sp = f", speedup {data['speedup']:.2f}x" if data.get("speedup") else ""
            console.print(f"  -> {data['status']}{sp}" + (f": {data['reason']}" if data["status"] != "correct" else ""))

    return on_event


def run(args: argparse.Namespace) -> int:
    from mk.commands._console import console as make_console

    from mk.loaders import load_task
    from mk.job import optimize_task

    if args.mode == "hitl":
        from mk.commands import hitl

        args.resume = None
        return hitl.run(args)
    console = make_console(stderr=args.json)
    task = load_task(args.task)
    if args.scale:
        task = task.only_scale(args.scale)

    on_event = progress_printer(console)

    search = {"algorithm": args.algorithm, "width": args.width, "depth": args.depth, "branches": args.branches,
              "workers": args.workers}
    with console.status("optimising…") if not args.json else contextlib.nullcontext():
        report = optimize_task(task, target=args.target, lm=args.lm, mode=args.mode, iterations=args.iterations, db=args.db,
                               out=args.out, max_trials=args.trials, on_event=on_event, search=search,
                               budget=budget_from(args), explore=args.explore)
    if args.json:
        print(json.dumps(report.summary()))
    else:
        speed = f"{report.speedup:.2f}x" if report.speedup is not None else "not measured (no device of this kind here)"
        console.print(f"[bold]{report.status}[/]: {report.stop_reason}")
        if report.kernel_path:  # one unbroken line: paths stay copyable when the output is piped
            console.print(f"kernel: {report.kernel_path}  speedup: {speed}  report: {report.report_path}  run: {report.run_id}",
                          soft_wrap=True)
        else:
            console.print(f"report: {report.report_path}  run: {report.run_id}", soft_wrap=True)
        if report.speedup is None and report.estimate:
            console.print(report.estimate["label"], highlight=False, soft_wrap=True)
    return 0 if report.status == "correct" else 1

