"""The held-out user functions (issue 25 item 4): does the offline author write a kernel the judge accepts?

Each function of ``tests/user_functions/heldout.py`` (written by a helper who had not read the author's code,
before anything was measured on it) goes through ``mk.optimize`` exactly as a user would call it, with the
offline (rule-based) author, no tuning (nothing can be timed without the device) and a fresh store, once per
target. A row records the verdict of the kept kernel (``correct`` or why none was kept), the author's proposal
(the kernel family) and, where no kernel was kept, one line on why: the run's stop reason and the families the
author declined, each with its own reason. Nothing here is timed on a device: ``seconds`` is the wall time of the
whole ``mk.optimize`` call on this machine (interpret mode and the chip's compiler without the chip).

    python -m evals.user_functions [--set 1|2|3] [--targets tpu,gpu] [--only NAME,NAME] [--out DIR] [--note TEXT]

``--set 2`` is the second held-out set (``tests/user_functions/heldout2.py``, written after the first set's results
were known, before any change measured on it), recorded in ``user_functions_2.{json,md}``; ``--set 3`` the third
(``tests/user_functions/heldout3.py``, 2026-12-08), in ``user_functions_3.{json,md}``.

Runs in parallel (one process per target, say) merge their rows into the same ``user_functions.json`` under a
file lock; ``user_functions.md`` is rewritten from every row held, each target with the command and date of its
run.
"""

from __future__ import annotations

import argparse
import fcntl
import json
import logging
import shlex
import sys
import tempfile
import time
import traceback
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
RESULTS = ROOT / "evals" / "results"

#: the share of functions that must get a Pallas kernel judged ``correct`` (issue 25 item 4)
GOAL = 0.8


def is_kernel(row: dict[str, Any]) -> bool:
    """A Pallas kernel judged correct: a pure-JAX rewrite (the ``rewrite`` family, judged without a kernel) is kept
    and shown, but it is not a kernel and does not count for the goal."""
    from mk.author import PURE_JAX

    return row["status"] == "correct" and not any(row["family"].startswith(f"{t}-") for t in PURE_JAX)


#: set -> (module of its functions, the stem of its result files)
SETS = {"1": ("tests.user_functions.heldout", "user_functions"),
        "2": ("tests.user_functions.heldout2", "user_functions_2"),
        "3": ("tests.user_functions.heldout3", "user_functions_3")}


def _functions(which: str = "1") -> list[Any]:
    import importlib

    sys.path.insert(0, str(ROOT))
    return list(importlib.import_module(SETS[which][0]).FUNCTIONS)


#: the families a model block is most likely one of: where nothing was proposed, the line gives their reasons
_NEAREST = ("attention", "flex_attention", "matmul", "swiglu", "rowwise", "cross_entropy")


def _squeeze(text: str, limit: int) -> str:
    text = " ".join(str(text).split())
    return text if len(text) <= limit else text[: limit - 3] + "..."


def _why(report: Any) -> str:
    """One line: the candidates tried and why each failed; or, where none was proposed, why the nearest families
    declined (every family's reason is in the JSON's ``declined``)."""
    tried = [f"{row.get('proposal') or row.get('plan') or 'candidate'}: {row.get('status')}: "
             f"{_squeeze(row.get('reason') or '', 160)}"
             for row in report.iterations or [] if row.get("status") and row.get("status") != "correct"]
    if tried:
        return " | ".join(tried)
    declined = report.declined or {}
    near = [f"{name}: {_squeeze(declined[name], 110)}" for name in _NEAREST if name in declined]
    return "nothing proposed; " + (" | ".join(near) if near else _squeeze(report.stop_reason or "", 300))


def judge_one(uf: Any, target: str, work: Path) -> dict[str, Any]:
    import mk

    t0 = time.perf_counter()
    row: dict[str, Any] = {"function": uf.name, "target": target}
    try:
        fast = mk.optimize(uf.fn, uf.shapes, static=dict(uf.static) or None,
                           static_argnames=tuple(uf.static_argnames) or None, target=target, lm="offline",
                           tune=False, cache=False, db=work / f"{uf.name}-{target}.duckdb", out=work / "out")
        report = fast.report
        row["status"] = report.status
        row["family"] = (report.best or {}).get("proposal") or ""
        row["why"] = "" if report.status == "correct" else _why(report)
        row["declined"] = {k: _squeeze(v, 400) for k, v in (report.declined or {}).items()}
        row["compiled"] = report.compile_check
    except Exception as exc:  # noqa: BLE001 - a user's call that raises is a row, with what it raised
        row["status"] = f"raised {type(exc).__name__}"
        row["family"] = ""
        row["why"] = str(exc).splitlines()[0][:600] if str(exc) else traceback.format_exc(limit=1)[-300:]
    row["seconds"] = round(time.perf_counter() - t0, 1)
    return row


def _merge(path: Path, rows: list[dict[str, Any]], runs: list[dict[str, Any]]) -> dict[str, Any]:
    """Under a lock: this run's rows replace the same (function, target) rows in ``path``."""
    path.parent.mkdir(parents=True, exist_ok=True)
    with open(path.with_suffix(".lock"), "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        held = json.loads(path.read_text()) if path.exists() else {"rows": [], "runs": []}
        mine = {(r["function"], r["target"]) for r in rows}
        held["rows"] = [r for r in held["rows"] if (r["function"], r["target"]) not in mine] + rows
        held["runs"] = held.get("runs", []) + runs
        held["rows"].sort(key=lambda r: (r["function"], r["target"]))
        path.write_text(json.dumps(held, indent=1) + "\n")
    return held


def render(held: dict[str, Any], names: list[str], which: str = "1") -> str:
    targets = sorted({r["target"] for r in held["rows"]})
    by = {(r["function"], r["target"]): r for r in held["rows"]}
    module = SETS[which][0].replace(".", "/") + ".py"
    lines = [f"# Held-out user functions, set {which}: the offline author, through `mk.optimize` (issue 25 item 4)", "",
             "Measured on this project's 2-core machine with no accelerator: each verdict is the judge's, in interpret "
             "mode with the chip's compiler run without the chip (nothing timed on a device; `s` is the wall time of the "
             f"whole call here). The functions (`{module}`) were written before any measurement "
             "on them by a helper who had not read the author's code; the author is never tuned on them.", ""]
    for t in targets:
        got = [by[(n, t)] for n in names if (n, t) in by]
        ok = sum(is_kernel(r) for r in got)
        rewrites = sum(r["status"] == "correct" for r in got) - ok
        lines.append(f"- **{t}**: {ok} of {len(got)} functions got a Pallas kernel judged `correct` "
                     f"({ok / max(len(got), 1):.0%}; the goal is {GOAL:.0%})"
                     + (f"; {rewrites} more got a pure-JAX rewrite judged `correct` (not a kernel)" if rewrites else ""))
    lines += ["", "| function | " + " | ".join(targets) + " |", "|---|" + "---|" * len(targets)]
    for n in names:
        cells = []
        for t in targets:
            r = by.get((n, t))
            cells.append("not run" if r is None else
                         f"`correct` {r['family']} ({r['seconds']:.0f} s)" if is_kernel(r) else
                         f"`correct` {r['family']}, no kernel ({r['seconds']:.0f} s)" if r["status"] == "correct" else
                         f"`{r['status']}` ({r['seconds']:.0f} s)")
        lines.append(f"| {n} | " + " | ".join(cells) + " |")
    lines += ["", "## Why no kernel, one line each", ""]
    for n in names:
        for t in targets:
            r = by.get((n, t))
            if r is not None and not is_kernel(r):
                lines.append(f"- {n} ({t}): {r['why'] or 'a pure-JAX rewrite was the only correct candidate'}")
    lines += ["", "## Runs", ""]
    for run in held.get("runs", []):
        got = run.get("correct") or {}
        kernels = run.get("kernels")  # runs before it was recorded counted pure-JAX rewrites as correct too
        lines.append(f"- {run['date']}, commit {run['commit']}, {run['seconds']:.0f} s: `{run['command']}` "
                     f"({', '.join(run['targets'])}; {run['functions']} functions"
                     + "".join(f"; {t}: {n} correct" + (f", {kernels[t]} of them Pallas kernels" if kernels else
                                                         " (pure-JAX rewrites included)") for t, n in got.items()) + ")"
                     + (f": {run['note']}" if run.get("note") else ""))
    return "\n".join(lines) + "\n"


def _commit() -> str:
    import subprocess

    try:
        return subprocess.run(["git", "rev-parse", "--short", "HEAD"], cwd=ROOT, capture_output=True, text=True,
                              timeout=10).stdout.strip() or "unknown"
    except OSError:
        return "unknown"


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--targets", default="tpu,gpu")
    ap.add_argument("--only", default="", help="comma-separated function names (default: all)")
    ap.add_argument("--out", default=str(RESULTS))
    ap.add_argument("--set", default="1", choices=sorted(SETS), help="which held-out set (default 1)")
    ap.add_argument("--note", default="", help="what this run measures, recorded with it")
    args = ap.parse_args(argv)
    logging.basicConfig(level=logging.WARNING)
    functions = _functions(args.set)
    names = [f.name for f in functions]
    only = [n for n in args.only.split(",") if n]
    unknown = sorted(set(only) - set(names))
    if unknown:
        ap.error(f"unknown function(s) {unknown}; the set has {names}")
    chosen = [f for f in functions if not only or f.name in only]
    targets = [t for t in args.targets.split(",") if t]
    started = time.perf_counter()
    rows = []
    with tempfile.TemporaryDirectory(prefix="mk-user-functions-") as tmp:
        for target in targets:
            for uf in chosen:
                row = judge_one(uf, target, Path(tmp))
                rows.append(row)
                print(f"{uf.name:28s} {target}: {row['status']} {row['family']} ({row['seconds']} s) {row['why'][:160]}",
                      flush=True)
    run = {"date": datetime.now(timezone.utc).strftime("%Y-%m-%d %H:%M UTC"), "commit": _commit(),
           "command": "python -m evals.user_functions " + shlex.join(argv if argv is not None else sys.argv[1:]),
           "targets": targets, "functions": len(chosen), "seconds": round(time.perf_counter() - started, 1),
           "correct": {t: sum(r["status"] == "correct" for r in rows if r["target"] == t) for t in targets},
           "kernels": {t: sum(is_kernel(r) for r in rows if r["target"] == t) for t in targets}}
    if args.note:
        run["note"] = args.note
    out = Path(args.out)
    stem = SETS[args.set][1]
    held = _merge(out / f"{stem}.json", rows, [run])
    (out / f"{stem}.md").write_text(render(held, names, args.set))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
