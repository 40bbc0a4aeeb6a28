"""Offline-author coverage: for each built-in task and each example task, and each target, did the
offline (rule-based) author produce a candidate the harness judged correct?

It runs ``mk bench``'s best-of-n method (every proposal the author has, each judged independently,
no timing) at the ``ci`` scale; on a machine without the device, TPU/GPU candidates are judged by
lowering for that platform plus interpret-mode execution. Writes ``evals/results/coverage.md`` and
``coverage.json`` (with the command that produced them).

    python -m evals.coverage [--targets tpu,gpu,cpu] [--tasks 12p,8p] [--suites jaxbench,examples] [--merge]
                             [--db FILE] [--merge-from OTHER/coverage.json ...]

``--merge`` re-judges only the tasks named and replaces their rows in the existing ``coverage.json``
(totals recounted from the rows; the merge is listed under the table with its own command and date).
``--db FILE`` keeps the store: a killed run given the same store again keeps every row it judged (a finished
suite and target is read back, an unfinished one resumed). ``--merge-from`` judges nothing: it merges another
run's ``coverage.json`` (e.g. other targets judged in parallel) into ``--out``'s, each listed with its command.
``--stored-only`` (with ``--db``) judges nothing and reports the rows a store holds, a killed run's finished tasks.
"""

from __future__ import annotations

import argparse
import json
import logging
import shlex
import sys
import tempfile
import time
from datetime import datetime, timezone
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
RESULTS = ROOT / "evals" / "results"
SUITES = {"jaxbench": "jaxbench", "examples": str(ROOT / "examples")}


def coverage(targets: list[str], suites: list[str], tasks: list[str] | None, db: Path, samples: int = 8,
             stored_only: bool = False) -> dict:
    from mk.bench import BenchConfig, run_bench
    from mk.errors import ConfigError

    from mk.bench.runner import select_refs

    rows, totals = [], {}
    for suite in suites:
        mine = tasks
        if tasks:  # keep the names this suite holds
            mine = [t for t in tasks if _holds(select_refs, SUITES[suite], t)]
            if not mine:
                continue
        for target in targets:
            t0 = time.perf_counter()
            stored = _stored(db, SUITES[suite], target, mine)
            if stored_only and stored is None:
                continue
            if stored is not None and (stored[1] == "finished" or stored_only):  # judged already: its rows, as recorded
                res_rows = stored[2]
                logging.info("%s on %s: the rows of %s benchmark %s in %s", suite, target, stored[1], stored[0], db)
            else:
                try:
                    res = run_bench(BenchConfig(SUITES[suite], target=target, methods=("best-of-n",), scale="ci",
                                                tasks=mine, lm="offline", samples=samples, measure=False, db=db,
                                                plots=False, resume=stored[0] if stored else None))
                except ConfigError as exc:  # --tasks names none of this suite's tasks
                    logging.info("%s on %s: %s", suite, target, exc)
                    continue
                res_rows = res.rows
            for r in res_rows:
                rows.append({"suite": suite, "task": r.task, "target": target, "covered": r.correct, "status": r.status,
                             "candidates": r.candidates, "best": r.best, "compiled": bool(r.compiled), "reason": "" if r.correct else r.reason,
                             "seconds": round(r.seconds, 2),
                             # every proposal's own verdict (a correct one other than the best may be the one a chip
                             # compiles at full: evals/full_scale.py joins them)
                             "judged": {s.name: s.status for s in r.progress},
                             # and the source each verdict is of (Candidate.digest), so a join is of the same code
                             "digests": {s.name: s.digest for s in r.progress if s.digest}})
            tot = totals.setdefault(target, {"tasks": 0, "covered": 0, "compiled": 0})
            covered = sum(bool(r.correct) for r in res_rows)
            tot["tasks"] += len(res_rows)
            tot["covered"] += covered
            tot["compiled"] += sum(bool(r.compiled) for r in res_rows)
            logging.info("%s on %s: %d/%d covered in %.0fs", suite, target, covered, len(res_rows), time.perf_counter() - t0)
    return {"rows": rows, "totals": totals}


def _stored(db: Path, suite: str, target: str, tasks: list[str] | None) -> tuple[str, str, list] | None:
    """(id, status, finished rows) of the newest coverage benchmark of ``suite`` on ``target`` (same tasks) in the store
    ``db``: a killed coverage run given its store again (``--db``) keeps what it judged and resumes the rest."""
    if not Path(db).exists():
        return None
    from mk.bench.record import list_benches, load_bench
    from mk.store import Store

    with Store.open(db) as store:
        for b in list_benches(store, limit=10_000):
            if b["suite"] == suite and b["target"] == target and b["scale"] == "ci" and b["methods"] == ["best-of-n"]:
                bench, rows = load_bench(store, b["id"])
                if ((bench.get("config") or {}).get("tasks") or None) == (list(tasks) if tasks else None):
                    return b["id"], b["status"], rows
    return None


def _compiled(row: dict) -> bool:
    """Rows written before ``compiled`` was recorded: a covered or incorrect task had compiled, a declined one not."""
    return bool(row.get("compiled", row["covered"] or row["status"] == "incorrect"))


def merge(old: dict, new: dict, how: str = "Re-judged with") -> dict:
    """``old`` with ``new``'s rows in place of the same (suite, task, target), totals recounted from the rows."""
    fresh = {(r["suite"], r["task"], r["target"]): r for r in new["rows"]}
    rows = [fresh.pop((r["suite"], r["task"], r["target"]), r) for r in old["rows"]] + list(fresh.values())
    totals: dict[str, dict[str, int]] = {}
    for r in rows:
        tot = totals.setdefault(r["target"], {"tasks": 0, "covered": 0, "compiled": 0})
        tot["tasks"] += 1
        tot["covered"] += bool(r["covered"])
        tot["compiled"] += _compiled(r)
    merges = old.get("merged", []) + [{"how": how, "command": new["command"], "date": new["date"], "seconds": new["seconds"],
                                       "tasks": sorted({r["task"] for r in new["rows"]})}]
    targets = list(old.get("targets", [])) + [t for t in new.get("targets", []) if t not in old.get("targets", [])]
    return {**old, "rows": rows, "totals": totals, "merged": merges, "targets": targets}


def _holds(select_refs, suite: str, name: str) -> bool:  # noqa: ANN001
    from mk.errors import ConfigError

    try:
        return bool(select_refs(suite, [name]))
    except ConfigError:
        return False


def _markdown(data: dict) -> str:
    targets = data["targets"]
    lines = ["# Offline-author coverage", "",
             f"Command: `{data['command']}`  ", f"Date: {data['date']} · mk {data['mk_version']} · {data['seconds']:.0f} s · "
             "scale `ci` · correctness only (no timing); tpu/gpu judged by lowering + interpret mode on a CPU.", "",
             "A task is covered on a target when at least one offline-author candidate was judged **correct** on the frozen "
             "suite, held-out scale included (sizes and static values the author never saw, mk/harness/heldout.py). "
             "`—` = the author declined (no template applies); `✗` = candidates were judged but none correct.", "",
             "| target | covered | compiled | tasks |", "|---|---|---|---|"]
    for t in targets:
        tot = data["totals"].get(t, {"tasks": 0, "covered": 0, "compiled": 0})
        lines.append(f"| {t} | {tot['covered']} | {tot['compiled']} | {tot['tasks']} |")
    lines += ["", "| suite | task | " + " | ".join(targets) + " |", "|---|---|" + "---|" * len(targets)]
    cell: dict[tuple[str, str], dict] = {}
    order: list[tuple[str, str]] = []
    for r in data["rows"]:
        key = (r["suite"], r["task"])
        if key not in order:
            order.append(key)
        cell[(key, r["target"])] = r  # type: ignore[index]
    for key in order:
        marks = []
        for t in targets:
            r = cell.get((key, t))  # type: ignore[arg-type]
            marks.append("?" if r is None else ("✓ " + r["best"]) if r["covered"] else ("—" if r["status"] == "declined" else "✗ " + r["status"]))
        lines.append(f"| {key[0]} | {key[1]} | " + " | ".join(marks) + " |")
    for m in data.get("merged", []):
        named = ", ".join(m["tasks"]) if len(m["tasks"]) <= 12 else f"{len(m['tasks'])} tasks' rows"
        lines += ["", f"{m.get('how', 'Re-judged with')} `{m['command']}` on {m['date']} ({m['seconds']:.0f} s), rows "
                  f"replaced or added: {named}."]
    fails = [r for r in data["rows"] if not r["covered"] and r["status"] != "declined"]
    if fails:
        lines += ["", "## Judged but not correct", ""]
        lines += [f"- {r['task']} on {r['target']} ({r['best'] or r['status']}): {r['reason'][:240]}" for r in fails]
    return "\n".join(lines) + "\n"


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--targets", default="tpu,gpu,cpu")
    p.add_argument("--suites", default="jaxbench,examples")
    p.add_argument("--tasks", default=None, help="comma-separated task ids/names to limit the run")
    p.add_argument("--out", default=str(RESULTS), help="folder for coverage.md / coverage.json")
    p.add_argument("--db", default=None, help="store file (default: a fresh temporary one)")
    p.add_argument("--merge", action="store_true", help="replace only the named tasks' rows in the existing coverage.json")
    p.add_argument("--stored-only", action="store_true",
                   help="with --db: judge nothing, report the rows the store holds (a killed run's finished tasks)")
    p.add_argument("--merge-from", action="append", default=[], metavar="JSON",
                   help="judge nothing: merge another run's coverage.json into --out's (its rows replace the same "
                        "suite, task and target; its command and date are listed); repeatable, in order")
    args = p.parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(message)s")
    for name in ("mk", "jax", "absl"):
        logging.getLogger(name).setLevel(logging.WARNING)
    from mk import __version__

    if args.merge_from:
        out = Path(args.out)
        data = json.loads((out / "coverage.json").read_text())
        for name in args.merge_from:
            data = merge(data, json.loads(Path(name).read_text()), how="Merged from a run of")
        return _write(out, data)
    targets = [t for t in args.targets.split(",") if t]
    suites = [s for s in args.suites.split(",") if s]
    tasks = [t for t in args.tasks.split(",") if t] if args.tasks else None
    t0 = time.perf_counter()
    with tempfile.TemporaryDirectory() as tmp:
        db = Path(args.db) if args.db else Path(tmp) / "coverage.duckdb"
        data = coverage(targets, suites, tasks, db, stored_only=args.stored_only)
    args_text = " ".join(shlex.quote(a) for a in (argv if argv is not None else sys.argv[1:]))
    data.update({"command": f"python -m evals.coverage {args_text}".strip(),
                 "date": datetime.now(timezone.utc).strftime("%Y-%m-%d %H:%M UTC"), "mk_version": __version__,
                 "seconds": time.perf_counter() - t0, "targets": targets})
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    if args.merge and (out / "coverage.json").exists():
        data = merge(json.loads((out / "coverage.json").read_text()), data)
    return _write(out, data)


def _write(out: Path, data: dict) -> int:
    (out / "coverage.json").write_text(json.dumps(data, indent=2))
    (out / "coverage.md").write_text(_markdown(data))
    print(_markdown(data))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
