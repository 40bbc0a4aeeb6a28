"""Speedups of the offline author's algebraic rewrites over XLA on the cpu target.

For every built-in task the rewrite template proposes for, time the reference
(jitted, i.e. XLA) and the rewritten candidate (jitted) side by side in one
process, interleaved round by round, at a mid scale that fits a small CPU.
Records medians, the inter-quartile range and min/max of each, the speedup of
the medians, and whether the candidate matched the reference at that scale.

    python -m evals.rewrites_bench [--rounds 15] [--tasks 21k_Gemm_Divide_Sum_Scaling ...]

Writes ``evals/results/rewrites_bench.json`` and ``.md`` with the command.
"""

from __future__ import annotations

import argparse
import json
import platform
import statistics
import sys
import time
from pathlib import Path

RESULTS = Path(__file__).resolve().parent / "results"

#: the mid scale: same axes as the built-in tasks' ci/full scales, sized for a few-core CPU
MID_DIMS = {"B": 256, "K": 2048, "N": 2048}


def _time(fn, args) -> float:
    t = time.perf_counter()
    fn(*args).block_until_ready()
    return time.perf_counter() - t


def _stats(xs: list[float]) -> dict[str, float]:
    q = statistics.quantiles(xs, n=4)
    return {"median_ms": statistics.median(xs) * 1e3, "q1_ms": q[0] * 1e3, "q3_ms": q[2] * 1e3,
            "min_ms": min(xs) * 1e3, "max_ms": max(xs) * 1e3}


def bench_task(task_id: str, rounds: int) -> dict:
    import jax
    import numpy as np

    from mk.author import rewrites
    from mk.author.emit import Unsupported
    from mk.author.trace import trace_scales
    from mk.suite import load_builtin
    from mk.task import Scale

    task = load_builtin(task_id)
    ci = task.scale("ci")
    try:  # propose from the ci scale alone first: most tasks decline, and cheaply
        rewrites.propose(task.with_scales({"ci": ci}), trace_scales(task.with_scales({"ci": ci})), "cpu")
    except Unsupported as exc:
        return {"task": task_id, "proposed": False, "reason": str(exc)}
    dims = {k: MID_DIMS.get(k, v) for k, v in ci.dims.items()}
    task = task.with_scales({"ci": ci, "mid": Scale("mid", dims=dims)})
    try:
        traced = trace_scales(task)
    except Exception as exc:  # the task's own shapes constrain its dims (e.g. N = 2 * K)
        return {"task": task_id, "proposed": False, "reason": f"the reference does not run at the mid scale: {exc}"}
    try:
        prop = rewrites.propose(task, traced, "cpu")
    except Unsupported as exc:
        return {"task": task_id, "proposed": False, "reason": str(exc)}
    ns: dict = {}
    exec(compile(prop.source, f"<rewrite {task_id}>", "exec"), ns)
    ref = jax.jit(task.bind(task.reference, "mid"))
    cand = jax.jit(task.bind(lambda *a: ns["kernel"](*a), "mid"))
    xs = [jax.device_put(x) for x in task.make_inputs("mid", 0)]
    r_out, c_out = np.asarray(ref(*xs), np.float32), np.asarray(cand(*xs), np.float32)  # compile + warm
    atol, rtol = task.tolerance.for_output(0)
    correct = bool(np.allclose(c_out, r_out, atol=atol, rtol=rtol))
    tr, tc = [], []
    for i in range(rounds):  # interleaved, alternating which goes first
        pair = ((ref, tr), (cand, tc)) if i % 2 == 0 else ((cand, tc), (ref, tr))
        for fn, acc in pair:
            acc.append(_time(fn, xs))
    ref_s, cand_s = _stats(tr), _stats(tc)
    return {"task": task_id, "proposed": True, "dims": dims, "rewrites": prop.rationale, "correct_at_mid": correct,
            "max_abs_err": float(np.max(np.abs(c_out - r_out))), "reference_xla": ref_s, "rewrite": cand_s,
            "speedup_of_medians": ref_s["median_ms"] / cand_s["median_ms"], "rounds": rounds}


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--rounds", type=int, default=15)
    ap.add_argument("--tasks", nargs="*", default=None, help="built-in task ids (default: every kernelbench-style task)")
    args = ap.parse_args(argv)
    import jax

    from mk.suite import list_builtin

    ids = args.tasks or [t.split(":", 1)[-1] for t in list_builtin() if t.split(":", 1)[-1].split("_")[0].endswith("k")]
    rows = [bench_task(t, args.rounds) for t in ids]
    cmd = "python -m evals.rewrites_bench" + " ".join([""] + (argv if argv is not None else sys.argv[1:]))
    meta = {"command": cmd, "jax": jax.__version__, "backend": jax.default_backend(), "machine": platform.platform(),
            "processor": platform.processor() or platform.machine(), "mid_dims": MID_DIMS}
    RESULTS.mkdir(exist_ok=True)
    (RESULTS / "rewrites_bench.json").write_text(json.dumps({"meta": meta, "results": rows}, indent=2))
    (RESULTS / "rewrites_bench.md").write_text(_markdown(meta, rows))
    print(_markdown(meta, rows))
    return 0


def _markdown(meta: dict, rows: list[dict]) -> str:
    out = ["# Rewrites vs XLA on the cpu target", "", f"Command: `{meta['command']}`  ",
           f"jax {meta['jax']} ({meta['backend']}), {meta['machine']}; mid scale dims {meta['mid_dims']} "
           "(other dims as at ci scale). Times in ms, interleaved rounds in one process; "
           "median [q1, q3] (min-max).", "",
           "| task | XLA reference | rewrite | speedup (medians) | correct at mid |", "|---|---|---|---|---|"]
    fmt = "{median_ms:.2f} [{q1_ms:.2f}, {q3_ms:.2f}] ({min_ms:.2f}-{max_ms:.2f})"
    for r in rows:
        if r["proposed"]:
            out.append(f"| {r['task']} | {fmt.format(**r['reference_xla'])} | {fmt.format(**r['rewrite'])} | "
                       f"{r['speedup_of_medians']:.1f}x | {r['correct_at_mid']} |")
    declined = [r for r in rows if not r["proposed"]]
    if declined:
        out += ["", f"Declined ({len(declined)}):", ""]
        out += [f"- {r['task']}: {r['reason']}" for r in declined]
    return "\n".join(out) + "\n"


if __name__ == "__main__":
    raise SystemExit(main())
