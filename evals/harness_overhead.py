"""Harness overhead, as ratios to a floor measured side by side in the same run.

    python -m evals.harness_overhead [--runs 5]

The floor is a bare ``python -c`` that imports JAX and runs one jitted op.
Measured, interleaved with floor runs:

- a whole ``mk eval`` of a trivial candidate at ci scale (process start, JAX
  import, tracer and runner included). Goal: median within 3x the floor.
- the per-trial cost of repeated evaluations inside one process (what
  autotuning pays per config: warm runner, spare tracer). Goal: within 1x the
  floor each.

Writes ``evals/results/harness_overhead.json`` with the command and every run.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

GOAL_EVAL_RATIO = 3.0
GOAL_TRIAL_RATIO = 1.0
FLOOR = [sys.executable, "-c", "import jax, jax.numpy as jnp; jax.jit(lambda x: x + 1)(jnp.ones(3)).block_until_ready()"]
RESULTS = Path(__file__).resolve().parent / "results" / "harness_overhead.json"

TASK = '''
import jax.numpy as jnp
from mk.task import ArgSpec, Scale, Task

def reference(x, y):
    return x * y + 1.0

TASK = Task("axpy_overhead", reference, (ArgSpec("x", ("n",), "float32"), ArgSpec("y", ("n",), "float32")),
            {"ci": Scale("ci", {"n": 1024}), "full": Scale("full", {"n": 1 << 20})}, default_scale="ci")
'''
CANDIDATE = "def kernel(x, y):\n    return x * y + 1.0\n"


def _trials_script(root: Path, trials: int) -> str:
    return f"""
import json, time
from mk.harness import build_suite, evaluate
from mk.loaders import load_task
task = load_task({str(root / "task_axpy.py")!r})
task = task.with_scales({{"ci": task.scale("ci")}})
suite = build_suite(task)
out = []
for _ in range({trials + 1}):
    t0 = time.perf_counter()
    r = evaluate(task, {str(root / "cand.py")!r}, target="cpu", suite=suite, measure=False)
    out.append((time.perf_counter() - t0, r.status))
print(json.dumps(out))
"""


def _timed(cmd: list[str], env: dict) -> tuple[float, subprocess.CompletedProcess]:
    t0 = time.perf_counter()
    proc = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=600)
    return time.perf_counter() - t0, proc


def measure(runs: int, trials: int = 6) -> dict:
    with tempfile.TemporaryDirectory(prefix="mk-overhead-") as tmp:
        root = Path(tmp)
        (root / "task_axpy.py").write_text(TASK)
        (root / "cand.py").write_text(CANDIDATE)
        env = dict(os.environ, MK_HOME=str(root / "home"))
        env.pop("MK_DB", None)
        cmd = [sys.executable, "-m", "mk", "eval", str(root / "task_axpy.py"), str(root / "cand.py"), "--scale", "ci", "--json"]
        floor, evals, statuses = [], [], []
        _timed(cmd, env)  # cold: reference outputs cached, files paged in
        for _ in range(runs):  # interleaved, so load on the machine hits both alike
            floor.append(_timed(FLOOR, env)[0])
            seconds, proc = _timed(cmd, env)
            evals.append(seconds)
            try:
                statuses.append(json.loads(proc.stdout)["status"])
            except (json.JSONDecodeError, KeyError):
                statuses.append(f"error (exit {proc.returncode}): {proc.stderr.strip()[-300:]}")
        seconds, proc = _timed([sys.executable, "-c", _trials_script(root, trials)], env)
        floor.append(_timed(FLOOR, env)[0])
        try:
            per = json.loads(proc.stdout.strip().splitlines()[-1])
        except (json.JSONDecodeError, IndexError):
            per = [[float("nan"), f"error: {proc.stderr.strip()[-300:]}"]]
    floor_s = statistics.median(floor)
    eval_s = statistics.median(evals)
    trial_s = statistics.median([p[0] for p in per[1:]]) if len(per) > 1 else float("nan")
    return {
        "command": "python -m evals.harness_overhead",
        "floor": "python -c 'import jax; jax.jit(lambda x: x + 1)(jnp.ones(3))'",
        "floor_runs_s": [round(x, 3) for x in floor],
        "floor_median_s": round(floor_s, 3),
        "eval_command": "mk eval task_axpy.py cand.py --scale ci --json",
        "eval_runs_s": [round(x, 3) for x in evals],
        "eval_median_s": round(eval_s, 3),
        "eval_ratio": round(eval_s / floor_s, 2),
        "eval_goal_ratio": GOAL_EVAL_RATIO,
        "trial_runs_s": [round(p[0], 3) for p in per],
        "trial_first_s": round(per[0][0], 3),
        "trial_median_s": round(trial_s, 3),
        "trial_ratio": round(trial_s / floor_s, 2),
        "trial_goal_ratio": GOAL_TRIAL_RATIO,
        "meets_goal": eval_s / floor_s <= GOAL_EVAL_RATIO and trial_s / floor_s <= GOAL_TRIAL_RATIO,
        "statuses": statuses + [p[1] for p in per],
        "machine": {"python": platform.python_version(), "cpus": os.cpu_count(), "platform": platform.platform(),
                    "load_avg_1m": os.getloadavg()[0]},
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=5, help="warm runs after one cold run (default 5)")
    parser.add_argument("--out", type=Path, default=RESULTS)
    args = parser.parse_args(argv)
    result = measure(args.runs)
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(result, indent=2) + "\n")
    print(f"floor (python + jax + one jitted op): {result['floor_median_s']:.2f} s\n"
          f"mk eval at ci:        {result['eval_median_s']:.2f} s = {result['eval_ratio']:.2f}x the floor (goal <= {GOAL_EVAL_RATIO:g}x)\n"
          f"repeated trial:       {result['trial_median_s']:.2f} s = {result['trial_ratio']:.2f}x the floor (goal <= {GOAL_TRIAL_RATIO:g}x)\n"
          f"-> {args.out}")
    return 0 if result["meets_goal"] and all(s == "correct" for s in result["statuses"]) else 1


if __name__ == "__main__":
    sys.exit(main())
