"""The quick start's wall time, as a ratio to a floor measured side by side in the same run (issue 23's time goal).

    python -m evals.quickstart_time [--runs 2] [--trials N]

The floor is a bare ``python -c`` that imports JAX and runs one jitted op (as in ``evals/harness_overhead.py``). The
quick start is the README's command, ``mk optimize examples/rmsnorm.py --target tpu --lm offline --scale ci``, each
run in a fresh store and output folder, interleaved with floor runs so load on the machine hits both alike. Goal:
at most 20x the floor. Each run's phase times (from the run's JSON report where it has them), its status and the
estimated speedup it printed (an estimate, labelled so, never a measurement) are recorded.

Writes ``evals/results/quickstart_time.json`` and ``.md`` with the command, the machine and its load.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import re
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from evals.harness_overhead import FLOOR

GOAL_RATIO = 20.0
ROOT = Path(__file__).resolve().parent.parent
RESULTS = Path(__file__).resolve().parent / "results"
EXAMPLE = ROOT / "examples" / "rmsnorm.py"


def _timed(cmd: list[str], env: dict[str, str], timeout: float) -> tuple[float, subprocess.CompletedProcess]:
    t0 = time.perf_counter()
    proc = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=timeout)
    return time.perf_counter() - t0, proc


def quickstart(trials: int | None) -> list[str]:
    cmd = [sys.executable, "-m", "mk", "optimize", str(EXAMPLE), "--target", "tpu", "--lm", "offline", "--scale", "ci"]
    return cmd + (["--trials", str(trials)] if trials is not None else [])


def _one(root: Path, n: int, trials: int | None, env: dict[str, str]) -> dict:
    out, db = root / f"out{n}", root / f"db{n}.duckdb"
    seconds, proc = _timed([*quickstart(trials), "--db", str(db), "--out", str(out)], env, timeout=1800)
    text = proc.stdout + proc.stderr
    estimate = re.search(r"estimated [\d.]+x over XLA[^\n]*", text)
    report = next(out.glob("**/report.json"), None) if out.exists() else None
    phases: dict = {}
    if report is not None:
        try:
            phases = json.loads(report.read_text()).get("phase_seconds") or {}
        except (OSError, json.JSONDecodeError):
            phases = {}
    kernel = next(out.glob("**/*.py"), None) if out.exists() else None
    return {"seconds": round(seconds, 1), "exit": proc.returncode, "kernel_written": kernel is not None,
            "estimate": estimate.group(0) if estimate else None, "phase_seconds": phases,
            "tail": "" if proc.returncode == 0 else text.strip()[-600:]}


def measure(runs: int, trials: int | None) -> dict:
    with tempfile.TemporaryDirectory(prefix="mk-quickstart-") as tmp:
        root = Path(tmp)
        env = dict(os.environ, MK_HOME=str(root / "home"))
        env.pop("MK_DB", None)
        floor, rows = [], []
        for n in range(runs):
            floor.append(_timed(FLOOR, env, 300)[0])
            rows.append(_one(root, n, trials, env))
        floor.append(_timed(FLOOR, env, 300)[0])
    floor_s = statistics.median(floor)
    qs = statistics.median(r["seconds"] for r in rows)
    return {
        "command": "python -m evals.quickstart_time" + (f" --runs {runs}" if runs != 2 else "")
                   + (f" --trials {trials}" if trials is not None else ""),
        "date": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()),
        "floor": "python -c 'import jax; jax.jit(lambda x: x + 1)(jnp.ones(3))'",
        "floor_runs_s": [round(x, 2) for x in floor],
        "floor_median_s": round(floor_s, 2),
        "quickstart": " ".join(["mk", *quickstart(trials)[3:]]).replace(str(ROOT) + "/", ""),
        "runs": rows,
        "median_s": qs,
        "ratio": round(qs / floor_s, 1),
        "goal_ratio": GOAL_RATIO,
        "meets_goal": qs / floor_s <= GOAL_RATIO and all(r["exit"] == 0 for r in rows),
        "machine": {"python": platform.python_version(), "cpus": os.cpu_count(), "platform": platform.platform(),
                    "load_avg_1m_at_end": round(os.getloadavg()[0], 2)},
    }


def markdown(result: dict) -> str:
    lines = ["# Quick-start wall time against a floor\n",
             f"Command: `{result['command']}` · {result['date']} · {result['machine']['cpus']} CPUs, load "
             f"{result['machine']['load_avg_1m_at_end']} at the end (other work on the machine counts against both "
             f"alike: interleaved runs)\n",
             f"Floor (`{result['floor']}`): median {result['floor_median_s']} s of {result['floor_runs_s']}\n",
             f"Quick start (`{result['quickstart']}`): median {result['median_s']} s = **{result['ratio']}x the floor** "
             f"(goal <= {result['goal_ratio']:g}x: {'met' if result['meets_goal'] else 'not met'})\n",
             "| run | seconds | exit | kernel written | estimate printed (an estimate, not a measurement) |",
             "|---|---|---|---|---|"]
    for n, r in enumerate(result["runs"]):
        lines.append(f"| {n} | {r['seconds']} | {r['exit']} | {r['kernel_written']} | {r['estimate'] or '-'} |")
    return "\n".join(lines) + "\n"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=2)
    parser.add_argument("--trials", type=int, default=None, help="pass --trials N to the quick start")
    parser.add_argument("--out", type=Path, default=RESULTS)
    args = parser.parse_args(argv)
    result = measure(args.runs, args.trials)
    args.out.mkdir(parents=True, exist_ok=True)
    (args.out / "quickstart_time.json").write_text(json.dumps(result, indent=2) + "\n")
    (args.out / "quickstart_time.md").write_text(markdown(result))
    print(markdown(result))
    return 0 if result["meets_goal"] else 1


if __name__ == "__main__":
    sys.exit(main())
