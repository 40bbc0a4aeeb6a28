"""Offline beam search on every example: how many distinct nodes it grows, and how many are correct.

Runs the real CLI, as a user would, once per example and target:

    mk optimize examples/<name>.py --mode search --algorithm beam --scale ci --target <t> --trials 0 --json

with a fresh store each, then reads the run's nodes from that store (``nodes.code_hash``: two nodes with the same
code count once). Issue 13 asks for more than one distinct node on every example.

    python -m evals.search_examples [--targets tpu,gpu] [--examples attention,matmul_gelu,rmsnorm,softmax]

Writes ``evals/results/search_examples.{json,md}`` with the command.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from datetime import datetime, timezone
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
RESULTS = Path(__file__).resolve().parent / "results"
EXAMPLES = ("attention", "matmul_gelu", "rmsnorm", "softmax")


def one(example: str, target: str, work: Path) -> dict:
    """One search through the CLI; the row of its distinct nodes and their verdicts."""
    from mk.store import Store

    db = work / f"{example}-{target}.duckdb"
    cmd = [sys.executable, "-m", "mk", "optimize", str(ROOT / "examples" / f"{example}.py"), "--mode", "search",
           "--algorithm", "beam", "--scale", "ci", "--target", target, "--trials", "0", "--json", "--db", str(db),
           "--out", str(work / f"out-{example}-{target}")]
    env = {**os.environ, "MK_HOME": str(work / "home")}
    started = time.perf_counter()
    proc = subprocess.run(cmd, capture_output=True, text=True, env=env, cwd=work)
    seconds = time.perf_counter() - started
    row = {"example": example, "target": target, "exit": proc.returncode, "seconds": round(seconds, 1)}
    try:
        report = json.loads(proc.stdout.strip().splitlines()[-1])
    except (ValueError, IndexError):
        return {**row, "error": (proc.stderr or proc.stdout).strip()[-400:]}
    row.update(status=report.get("status"), run_id=report.get("run_id"))
    with Store.open(str(db)) as store:
        nodes = store.query("SELECT code_hash, status, plan FROM nodes WHERE run_id = ?", [report["run_id"]])
    distinct = {n["code_hash"] for n in nodes if n["code_hash"]}
    row.update(nodes=len(nodes), distinct=len(distinct),
               correct=len({n["code_hash"] for n in nodes if n["status"] == "correct" and n["code_hash"]}),
               plans=sorted({(n["plan"] or "").split("\n")[0][:60].rstrip(" ;,") for n in nodes if n["code_hash"]}))
    return row


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--targets", default="tpu,gpu")
    p.add_argument("--examples", default=",".join(EXAMPLES))
    p.add_argument("--out", default=str(RESULTS))
    args = p.parse_args(argv)
    rows = []
    with tempfile.TemporaryDirectory(prefix="mk-search-examples-") as tmp:
        for example in [e for e in args.examples.split(",") if e]:
            for target in [t for t in args.targets.split(",") if t]:
                row = one(example, target, Path(tmp))
                rows.append(row)
                print(f"{example:12} {target:4} exit {row['exit']}  {row.get('status', '?'):22} nodes {row.get('nodes', '-')}"
                      f"  distinct {row.get('distinct', '-')}  correct {row.get('correct', '-')}  {row['seconds']} s",
                      flush=True)
    command = "python -m evals.search_examples" + ("" if argv is None and len(sys.argv) == 1 else " " + " ".join(argv or sys.argv[1:]))
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    when = datetime.now(timezone.utc).strftime("%Y-%m-%d %H:%M UTC")
    (out / "search_examples.json").write_text(json.dumps({"command": command, "date": when, "rows": rows}, indent=1))
    lines = ["# Offline beam search on every example", "", f"Command: `{command}`  ", f"Date: {when} · scale `ci` · no model "
             "(the offline author) · tpu/gpu judged by lowering + interpret mode on a CPU.", "",
             "Each row is one `mk optimize examples/<name>.py --mode search --algorithm beam --scale ci --target <t> "
             "--trials 0` with a fresh store; nodes are counted from that store, distinct by code hash.", "",
             "| example | target | status | nodes | distinct | correct | plans | seconds |", "|---|---|---|---|---|---|---|---|"]
    for r in rows:
        lines.append(f"| {r['example']} | {r['target']} | {r.get('status', 'error: ' + r.get('error', '')[:80])} | "
                     f"{r.get('nodes', '-')} | {r.get('distinct', '-')} | {r.get('correct', '-')} | "
                     f"{'; '.join(r.get('plans', []))} | {r['seconds']} |")
    grew = sum(1 for r in rows if r.get("distinct", 0) > 1)
    lines += ["", f"More than one distinct node: **{grew} of {len(rows)}** searches."]
    (out / "search_examples.md").write_text("\n".join(lines) + "\n")
    return 0 if grew == len(rows) else 1


if __name__ == "__main__":
    raise SystemExit(main())
