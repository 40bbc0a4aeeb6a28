"""Peak memory of a whole ``mk eval`` at full scale, against the goal of 4x one case plus 1.5 GB.

    python -m evals.memory [--tasks 12p_RMSNorm,6p_Paged_Attention] [--cases N]

Beside it, the peak of a bare process that draws one case and runs the jitted
reference once (what any judge pays at least). For each task the candidate is the task's own reference (a pure-JAX candidate,
``--target cpu``), judged at ``full`` scale. A sampler adds up the resident
memory of ``mk eval`` and every process under it (judge, tracer, runner)
every 20 ms; the peak is compared with ``4 * (one case's input + output
bytes) + 1.5 GB``. Writes ``evals/results/memory.json`` and prints a table.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

import numpy as np

RESULTS = Path(__file__).resolve().parent / "results" / "memory.json"
FIXED_MB = 1500.0


def case_bytes(task_id: str) -> int:
    import jax

    from mk.loaders import load_task

    task = load_task(f"jaxbench:{task_id}")
    structs = task.arg_structs("full")
    outs = jax.eval_shape(task.bind(task.reference, "full"), *structs)
    size = lambda s: int(np.prod(s.shape)) * np.dtype(s.dtype).itemsize  # noqa: E731
    return sum(map(size, structs)) + sum(map(size, jax.tree_util.tree_leaves(outs)))


def candidate_source(task_id: str) -> str:
    """The task's reference function as a candidate (with the module's jax imports), entry ``kernel``."""
    import inspect

    from mk.loaders import load_task

    task = load_task(f"jaxbench:{task_id}")
    body = inspect.getsource(task.reference)
    return f"import jax\nimport jax.numpy as jnp\n\n\n{body}\n\nkernel = {task.reference.__name__}\n"


FLOOR = """
import sys, jax
from mk.loaders import load_task
task = load_task("jaxbench:" + sys.argv[1])
x = task.make_inputs("full", 0, "native")
jax.block_until_ready(jax.jit(task.bind(task.reference, "full"))(*x))
"""


def _peak(cmd: list[str], env: dict) -> tuple[float, float, str, str, int]:
    """(peak MB of the process tree, seconds, stdout, stderr, exit code)."""
    from mk.harness.process import tree_rss_mb

    t0 = time.perf_counter()
    proc = subprocess.Popen(cmd, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    peak = [0.0]

    def sample() -> None:
        while proc.poll() is None:
            peak[0] = max(peak[0], tree_rss_mb(proc.pid))
            time.sleep(0.02)

    sampler = threading.Thread(target=sample, daemon=True)
    sampler.start()
    out, err = proc.communicate()
    sampler.join()
    return peak[0], time.perf_counter() - t0, out, err, proc.returncode


def run(task_id: str, workdir: Path) -> dict:
    cand = workdir / f"{task_id}_reference.py"
    cand.write_text(candidate_source(task_id))
    env = dict(os.environ, MK_HOME=str(workdir / "home"))
    env.pop("MK_DB", None)
    floor_mb, _, _, _, _ = _peak([sys.executable, "-c", FLOOR, task_id], env)
    cmd = [sys.executable, "-m", "mk", "eval", f"jaxbench:{task_id}", str(cand), "--target", "cpu", "--scale", "full",
           "--no-time", "--json"]
    peak_mb, seconds, out, err, rc = _peak(cmd, env)
    peak = [peak_mb]
    proc = type("P", (), {"returncode": rc})
    try:
        verdict = json.loads(out)
        status, reason = verdict["status"], verdict["reason"]
    except (json.JSONDecodeError, KeyError):
        status, reason = f"error (exit {proc.returncode})", err.strip()[-400:]
    one = case_bytes(task_id) / 2**20
    goal = 4 * one + FIXED_MB
    return {"task": task_id, "status": status, "reason": reason, "seconds": round(seconds, 1), "case_mb": round(one, 1),
            "peak_mb": round(peak[0], 1), "goal_mb": round(goal, 1), "ratio_to_goal": round(peak[0] / goal, 3),
            "reference_alone_mb": round(floor_mb, 1), "peak_over_reference_alone": round(peak[0] / max(floor_mb, 1.0), 2),
            "meets_goal": peak[0] <= goal and status == "correct",
            "command": " ".join(["mk", *cmd[3:5], f"<{task_id} reference as candidate>", *cmd[6:]])}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--tasks", default="12p_RMSNorm,6p_Paged_Attention")
    parser.add_argument("--out", type=Path, default=RESULTS)
    parser.add_argument("--reference-only", default="", metavar="TASKS",
                        help="also measure only the reference alone for these tasks (where mk eval cannot fit in memory)")
    args = parser.parse_args(argv)
    rows = []
    with tempfile.TemporaryDirectory(prefix="mk-memory-") as tmp:
        for task_id in [t for t in args.reference_only.split(",") if t]:
            env = dict(os.environ, MK_HOME=str(Path(tmp) / "home"))
            floor_mb, seconds, _, err, rc = _peak([sys.executable, "-c", FLOOR, task_id], env)
            one = case_bytes(task_id) / 2**20
            rows.append({"task": task_id, "status": "reference only" if rc == 0 else f"error (exit {rc})",
                         "case_mb": round(one, 1), "reference_alone_mb": round(floor_mb, 1),
                         "goal_mb": round(4 * one + FIXED_MB, 1), "seconds": round(seconds, 1),
                         "note": "mk eval not run: the reference alone exceeds the goal (and with the candidate, this machine)",
                         "meets_goal": False})
            print(f"{task_id:22s} reference alone {floor_mb:8.0f} MB (goal for mk eval {4 * one + FIXED_MB:8.0f} MB)", flush=True)
        for task_id in [t for t in args.tasks.split(",") if t]:
            rows.append(run(task_id, Path(tmp)))
            r = rows[-1]
            print(f"{r['task']:22s} {r['status']:10s} one case {r['case_mb']:8.0f} MB  peak {r['peak_mb']:8.0f} MB  "
                  f"goal {r['goal_mb']:8.0f} MB ({r['ratio_to_goal']:.2f} of it)  reference alone {r['reference_alone_mb']:8.0f} MB  "
                  f"{r['seconds']:.0f} s", flush=True)
    result = {"command": "python -m evals.memory --tasks " + args.tasks
              + (f" --reference-only {args.reference_only}" if args.reference_only else ""), "goal": "peak <= 4 x (one case's input + output bytes) + 1.5 GB",
              "rows": rows, "machine": {"cpus": os.cpu_count()}}
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(result, indent=2) + "\n")
    return 0 if all(r["meets_goal"] for r in rows if r["status"] != "reference only") else 1


if __name__ == "__main__":
    sys.exit(main())
