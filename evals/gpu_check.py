"""GPU check: the offline author and the harness over suite tasks on a real GPU, in one command.

    python -m evals.gpu_check                      # on a single-GPU machine (e.g. H200): full scale, timed
    python -m evals.gpu_check --scale ci --tasks jaxbench:12p_RMSNorm --out /tmp/dry.json   # dry run anywhere

For each task the offline author proposes its Pallas (Triton) candidates; each is
judged by ``mk.harness.evaluate`` with ``--target gpu`` and profiled
(``mk.profile.profile``: roofline fraction where the hardware is known). Tasks
are run until ``--budget-s`` is spent (the rest are listed as skipped). The
results JSON holds the command, the machine, per-candidate verdicts, speedups
and roofline fractions, and a summary.

Without a GPU the full-scale check is refused (exit 2): interpreting full-size
kernels on a CPU would take hours and measure nothing. At ``--scale ci`` it runs
as a dry run in interpret mode; every number that needs the device says
"not measured" instead.
"""

from __future__ import annotations

import argparse
import json
import logging
import math
import platform
import statistics
import sys
import time
from pathlib import Path
from typing import Any

log = logging.getLogger("evals.gpu_check")

RESULTS = Path(__file__).resolve().parent / "results" / "gpu_check.json"
#: one task per kernel family first (so a budget that runs out still measures every family), then more matmul epilogues
DEFAULT_TASKS = (
    "jaxbench:8p_GEMM", "jaxbench:12p_RMSNorm", "jaxbench:13p_Cross_Entropy", "jaxbench:1p_Flash_Attention",
    "jaxbench:9p_SwiGLU_MLP", "jaxbench:11p_Megablox_GMM", "jaxbench:6p_Paged_Attention",
    "jaxbench:7p_Ragged_Paged_Attention", "jaxbench:15p_RetNet_Retention", "jaxbench:18k_Conv2D_ReLU_BiasAdd",
    "jaxbench:10p_Sparse_MoE", "jaxbench:17p_Triangle_Multiplication", "jaxbench:5p_Flex_Attention",
    "jaxbench:19k_Matmul_Subtract_Multiply_ReLU", "jaxbench:30k_Matmul_Scaling_ResidualAdd",
    "jaxbench:37k_Matmul_Swish_Scaling", "jaxbench:41k_Gemm_Add_ReLU", "jaxbench:44k_Matmul_Divide_GELU",
)
BUDGET_S = 480.0
NOT_MEASURED = "not measured"


def check_task(task_id: str, *, target: str, scale: str, timeouts: dict[str, float]) -> dict[str, Any]:
    """Propose with the offline author, judge and profile every proposal for one task."""
    from mk.author import OfflineAuthor
    from mk.harness import evaluate
    from mk.profile import profile
    from mk.suite import load_builtin

    started = time.perf_counter()
    task = load_builtin(task_id)
    authored = OfflineAuthor().propose(task, target)
    entry: dict[str, Any] = {"task": task_id, "scale": scale, "declined": authored.declined, "candidates": []}
    for proposal in authored.proposals:
        result = evaluate(task, proposal.source, target=target, scale=scale, timeouts=timeouts)
        report = profile(task, result, target, scale=scale, candidate=proposal.source)  # traces on the device
        t = result.timing
        entry["candidates"].append({
            "name": proposal.name, "template": proposal.template, "status": result.status, "reason": result.reason,
            "speedup": result.speedup, "timing": _not_measured(t.reason) if t is not None and not t.measured else None,
            "candidate_ms": t.candidate_median_s * 1e3 if t is not None and t.measured else None,
            "reference_ms": t.reference_median_s * 1e3 if t is not None and t.measured else None,
            "roofline_fraction": report.roofline_fraction, "floor_ms": report.floor_s * 1e3 if report.floor_s else None,
            "bound": report.bound, "hardware": report.hardware, "flags": result.flags,
            "heaviest_ops": [op.model_dump() for op in report.heaviest_ops[:3]], "profile_notes": report.notes,
            "seconds": round(result.seconds, 2),
        })
    best = max((c for c in entry["candidates"] if c["status"] == "correct"),
               key=lambda c: c["speedup"] or 0.0, default=None)
    entry["best"] = best["name"] if best else None
    entry["best_speedup"] = best["speedup"] if best else None
    entry["seconds"] = round(time.perf_counter() - started, 2)
    return entry


def _not_measured(reason: str) -> str:
    return reason if reason.startswith(NOT_MEASURED) else f"{NOT_MEASURED}: {reason}"


def summarize(tasks: list[dict[str, Any]], measured: bool) -> dict[str, Any]:
    candidates = [c for t in tasks for c in t.get("candidates", [])]
    speedups = [t["best_speedup"] for t in tasks if t.get("best_speedup")]
    fractions = [c["roofline_fraction"] for c in candidates if c.get("roofline_fraction") is not None]
    return {
        "tasks_run": sum(1 for t in tasks if "candidates" in t),
        "tasks_skipped": sum(1 for t in tasks if t.get("skipped")),
        "tasks_with_correct_candidate": sum(1 for t in tasks if t.get("best")),
        "candidates": len(candidates),
        "correct": sum(c["status"] == "correct" for c in candidates),
        "geomean_best_speedup": math.exp(statistics.fmean(math.log(s) for s in speedups)) if speedups else None,
        "median_roofline_fraction": statistics.median(fractions) if fractions else None,
        "timing": "measured on the device" if measured else f"{NOT_MEASURED}: no GPU here (interpret mode)",
    }


def run_check(task_ids: list[str], *, target: str = "gpu", scale: str = "full", budget_s: float = BUDGET_S,
              timeouts: dict[str, float] | None = None) -> dict[str, Any]:
    import jax

    from mk.errors import MkError
    from mk.targets import get_target

    tgt = get_target(target)
    present = tgt.device_present()
    started = time.perf_counter()
    timeouts = timeouts or {"import_s": 120, "compile_s": 180, "case_s": 120, "timing_s": 120}
    tasks: list[dict[str, Any]] = []
    for task_id in task_ids:
        elapsed = time.perf_counter() - started
        if elapsed > budget_s:
            tasks.append({"task": task_id, "skipped": f"time budget of {budget_s:.0f} s spent after {elapsed:.0f} s"})
            continue
        try:
            tasks.append(check_task(task_id, target=target, scale=scale, timeouts=timeouts))
        except MkError as exc:  # a task that cannot be loaded or judged is a result, not a crash
            tasks.append({"task": task_id, "error": str(exc)})
        log.info("%s done at %.0f s", task_id, time.perf_counter() - started)
    return {
        "command": " ".join(["python -m evals.gpu_check", *sys.argv[1:]]),
        "target": target, "scale": scale, "mode": tgt.mode(), "measured": present and tgt.can_time(),
        "device": tgt.device_kind(), "jax": jax.__version__, "platform": platform.platform(),
        "python": platform.python_version(), "budget_s": budget_s,
        "wall_s": round(time.perf_counter() - started, 1), "tasks": tasks, "summary": summarize(tasks, present),
    }


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m evals.gpu_check", description=__doc__.split("\n\n")[0])
    p.add_argument("--tasks", nargs="+", default=list(DEFAULT_TASKS), help="built-in task ids")
    p.add_argument("--target", choices=("gpu", "tpu"), default="gpu")
    p.add_argument("--scale", default="full")
    p.add_argument("--budget-s", type=float, default=BUDGET_S, help="stop starting new tasks after this many seconds")
    p.add_argument("--out", default=str(RESULTS))
    args = p.parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(levelname)s %(name)s: %(message)s")
    from mk.targets import get_target

    if not get_target(args.target).device_present() and args.scale == "full":
        print(f"error: no {args.target} device here, so nothing can be measured at full scale "
              f"(interpreting full-size kernels would take hours); run this on the {args.target} machine, "
              "or pass --scale ci for a dry run", file=sys.stderr)
        return 2
    results = run_check(args.tasks, target=args.target, scale=args.scale, budget_s=args.budget_s)
    out = Path(args.out)
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(results, indent=2, default=str) + "\n")
    s = results["summary"]
    print(f"{s['tasks_run']} tasks, {s['correct']}/{s['candidates']} candidates correct, geomean speedup "
          f"{s['geomean_best_speedup'] if s['geomean_best_speedup'] is not None else NOT_MEASURED}; wrote {out}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
