"""Harness overhead: wall time of a whole ``mk eval`` (process start and JAX import included)
on a trivial candidate at ci scale. Goal: median < 5 s on a laptop-class CPU.

    python -m evals.harness_overhead [--runs 5]

Writes ``evals/results/harness_overhead.json`` with the command, every run's
seconds, the cold first run (reference outputs not yet cached) and the median
of the warm runs.
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

GOAL_S = 5.0
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


def measure(runs: int) -> dict:
    with tempfile.TemporaryDirectory(prefix="mk-overhead-") as tmp:
        root = Path(tmp)
        (root / "task_axpy.py").write_text(TASK)
        (root / "cand.py").write_text(CANDIDATE)
        env = dict(os.environ, MK_HOME=str(root / "home"))
        env.pop("MK_DB", None)
        cmd = [sys.executable, "-m", "mk", "eval", str(root / "task_axpy.py"), str(root / "cand.py"), "--scale", "ci", "--json"]
        seconds, statuses = [], []
        for _ in range(runs + 1):
            t0 = time.perf_counter()
            proc = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=300)
            seconds.append(time.perf_counter() - t0)
            try:
                statuses.append(json.loads(proc.stdout)["status"])
            except (json.JSONDecodeError, KeyError):
                statuses.append(f"error (exit {proc.returncode}): {proc.stderr.strip()[-300:]}")
    warm = seconds[1:]
    return {
        "command": "mk eval task_axpy.py cand.py --scale ci --json",
        "argv": [Path(a).name if "/" in a else a for a in cmd],
        "runs": runs,
        "cold_first_run_s": round(seconds[0], 3),
        "warm_runs_s": [round(s, 3) for s in warm],
        "median_s": round(statistics.median(warm), 3),
        "goal_s": GOAL_S,
        "meets_goal": statistics.median(warm) < GOAL_S,
        "statuses": statuses,
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
    print(f"mk eval overhead: median {result['median_s']:.2f} s over {args.runs} warm runs "
          f"(cold {result['cold_first_run_s']:.2f} s; goal < {GOAL_S:g} s) -> {args.out}")
    return 0 if result["meets_goal"] and all(s == "correct" for s in result["statuses"]) else 1


if __name__ == "__main__":
    sys.exit(main())
