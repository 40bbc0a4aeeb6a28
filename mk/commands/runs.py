"""`mk runs`, `mk show RUN [--json]`, `mk resume RUN`: browse and continue what the store holds."""

from __future__ import annotations

import argparse
import json
from typing import Any

from mk.commands.optimize import add_budget_flags, budget_from


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("runs", help="list the runs in the store, newest first")
    p.add_argument("--limit", type=int, default=30, help="show at most this many runs (default: 30)")
    p.add_argument("--db", default=None, help="DuckDB file (default: $MK_DB or ~/.mk/mk.duckdb)")
    p.add_argument("--json", action="store_true", help="print the runs as JSON")
    p.set_defaults(func=list_runs)

    p = sub.add_parser("show", help="one run: its best node, the best node's lineage and every node's verdict")
    p.add_argument("run", help="a run id (or a unique prefix of one)")
    p.add_argument("--db", default=None, help="DuckDB file (default: $MK_DB or ~/.mk/mk.duckdb)")
    p.add_argument("--json", action="store_true", help="print the run as JSON")
    p.add_argument("--code", action="store_true", help="also print the best node's code")
    p.set_defaults(func=show)

    p = sub.add_parser("resume", help="continue an interrupted run: a search keeps its completed nodes and runs the missing "
                                      "ones; an auto or HITL run keeps its snapshots and continues at the next plan")
    p.add_argument("run", help="a run id (or a unique prefix of one)")
    p.add_argument("--db", default=None, help="DuckDB file (default: $MK_DB or ~/.mk/mk.duckdb)")
    p.add_argument("--workers", choices=["process", "inline", "ray"], default=None, help="override the run's worker backend")
    p.add_argument("--max-workers", type=int, default=None, help="override the run's number of parallel workers")
    p.add_argument("--lm", default=None, help="the author for an auto/HITL run driven by a model (default: the offline author)")
    p.add_argument("--out", default="mk-out", help="folder for the best kernel")
    add_budget_flags(p, "a new budget: ")
    p.add_argument("--json", action="store_true", help="print the resumed run's summary as JSON")
    p.set_defaults(func=resume)


def read_store(db: str | None) -> Any:
    """The store a read command looks at; a StoreError when a named file does not exist (a mistyped --db must
    not create an empty store and report that it holds no runs)."""
    from pathlib import Path

    from mk.errors import StoreError
    from mk.store import MEMORY, Store, resolve_path

    where = resolve_path(db)
    if db is not None and str(db) != MEMORY and isinstance(where, Path) and not where.exists():
        raise StoreError(f"no mk store at {where}", hint="check the --db path (mk creates a store on its first run)")
    return Store.open(db)


def list_runs(args: argparse.Namespace) -> int:
    from rich.console import Console
    from rich.table import Table

    with read_store(args.db) as store:
        rows = store.query(
            """SELECT r.id, r.mode, r.status, r.reason, r.started_at, r.finished_at, t.name AS task,
                      (SELECT count(*) FROM nodes n WHERE n.run_id = r.id) AS nodes,
                      (SELECT max(speedup) FROM nodes n WHERE n.run_id = r.id AND n.status = 'correct') AS best_speedup
               FROM runs r LEFT JOIN tasks t ON t.fingerprint = r.task_fingerprint
               ORDER BY r.started_at DESC LIMIT ?""", [int(args.limit)])
    if args.json:
        print(json.dumps(rows, default=str))
        return 0
    table = Table("run", "task", "mode", "status", "nodes", "best", "started")
    for r in rows:
        best = f"{r['best_speedup']:.2f}x" if r["best_speedup"] is not None else "-"
        table.add_row(r["id"][:12], r["task"] or "?", r["mode"], r["status"], str(r["nodes"]), best, str(r["started_at"])[:19])
    Console(highlight=False).print(table if rows else "no runs in the store yet")
    return 0


def show(args: argparse.Namespace) -> int:
    from rich.console import Console

    with read_store(args.db) as store:
        run = store.find_run(args.run)
        info = describe_run(store, run)
    if args.json:
        print(json.dumps(info, default=str))
        return 0
    con = Console(highlight=False)
    con.print(f"[bold]run {run['id']}[/] ({run['mode']}, task {info['task'] or '?'}): {run['status']}")
    if run.get("reason"):
        con.print(f"  {run['reason']}")
    best = info["best"]
    if best:
        con.print(f"[bold]best node[/] {best['key']} ({best['id'][:12]}): {best['status']}, speedup {_fmt(best['speedup'])}")
        con.print("lineage: " + " -> ".join(f"{n['key']} [{n['plan']}: {n['status']} {_fmt(n['speedup'])}]" for n in info["lineage"]))
    for n in info["nodes"]:
        con.print(f"  {'  ' * max(n['depth'] - 1, 0)}{n['key']:<10} {n['plan']:<18} {n['status']:<14} {_fmt(n['speedup']):>8}  {n['reason'][:80]}")
    if args.code and best:
        con.print(best["code"], markup=False)
    return 0


def resume(args: argparse.Namespace) -> int:
    with read_store(args.db) as store:
        run = store.find_run(args.run)
    if run.get("mode") == "search":
        summary = _resume_search(args, run)
    else:
        summary = _resume_session(args, run)
    if args.json:
        print(json.dumps(summary))
    else:
        print(f"run {summary['run_id']}: {summary['status']}; {summary['progress']}; {summary['stop_reason']}")
        if summary.get("kernel_path"):
            print(f"kernel: {summary['kernel_path']}")
    return 0 if summary["status"] == "correct" else 1


def _resume_search(args: argparse.Namespace, run: dict[str, Any]) -> dict[str, Any]:
    from mk.programs.search import Search
    from mk.store import Store

    overrides: dict[str, Any] = {}
    if args.workers:
        overrides["workers"] = args.workers
    if args.max_workers:
        overrides["max_workers"] = args.max_workers
    with Store.open(args.db) as store:
        before = len(store.nodes(run["id"]))
        result = Search.resume(run["id"], store=store, **overrides)
    best = result.best
    kernel = None
    if best is not None:
        from mk.job import Best

        kernel = _write_kernel(args, run, Best(best.code, best.status, best.speedup, best.plan or best.key, {}, best.plan))
    return {"run_id": result.run_id, "mode": "search", "status": result.status, "nodes": len(result.nodes), "resumed_from": before,
            "progress": f"{len(result.nodes)} nodes ({before} kept, {len(result.nodes) - before} new)",
            "best_node": best.key if best else None, "speedup": best.speedup if best else None,
            "stop_reason": result.stop_reason, "kernel_path": kernel}


def _resume_session(args: argparse.Namespace, run: dict[str, Any]) -> dict[str, Any]:
    from mk.programs.session import Session

    author = None
    if args.lm and args.lm != "offline":
        from mk.authors import resolve_author

        author, _ = resolve_author(args.lm)
    session = Session.resume(run["id"], db=args.db, author=author, budget=budget_from(args))
    before = len(session.snapshots)
    best = session.run_to_end()
    kernel = _write_kernel(args, run, best, session) if best is not None else None
    return {"run_id": session.run_id, "mode": run.get("mode"), "status": "correct" if best else "no_correct_candidate",
            "snapshots": len(session.snapshots), "resumed_from": before,
            "progress": f"{len(session.snapshots)} snapshots ({before} kept, {len(session.snapshots) - before} new)",
            "speedup": best.speedup if best else None, "stop_reason": session.traj.stop_reason, "kernel_path": kernel}


def _write_kernel(args: argparse.Namespace, run: dict[str, Any], best: Any, session: Any = None) -> str | None:
    """The resumed run's best kernel, with its provenance header, into --out."""
    from pathlib import Path

    from mk.job import prepare_output_dir, with_provenance
    from mk.loaders import load_task
    from mk.store import Store
    from mk.targets import get_target

    target = (run.get("config") or {}).get("target") or (run.get("config") or {}).get("search", {}).get("target") or "tpu"
    envelope = None
    if session is not None:
        from mk.harness.envelope import Envelope

        task, suite_hash, envelope = session.task, session.traj.suite_hash, Envelope.of(session.task, session.traj.suite)
    else:
        from mk.harness.envelope import Envelope
        from mk.harness.suite import build_suite

        config = run.get("config") or {}
        locator = config.get("task_locator") or config.get("locator")
        if not locator:
            with Store.open(args.db) as store:
                row = store.get_task(run["task_fingerprint"]) if run.get("task_fingerprint") else None
            if not row or not row.get("source"):
                return None
            locator = row["source"]
        task = load_task(locator)
        if config.get("scales"):
            task = task.with_scales({n: task.scale(n) for n in config["scales"]})
        suite = build_suite(task)
        suite_hash = config.get("suite_hash") or suite.hash
        envelope = Envelope.of(task, suite) if suite.hash == suite_hash else None
    out = prepare_output_dir(args.out)
    path = Path(out) / f"{task.name}_{target}.py"
    path.write_text(with_provenance(best, task, suite_hash, get_target(target), envelope))
    return str(path)


def describe_run(store: Any, run: dict[str, Any]) -> dict[str, Any]:
    """The run as plain values: its row, every node (key, verdict), the best node and its lineage."""
    task = store.get_task(run["task_fingerprint"]) if run.get("task_fingerprint") else None
    nodes = []
    for row in store.nodes(run["id"]):
        meta = row.get("meta") or {}
        nodes.append({"id": row["id"], "key": meta.get("key") or row["id"][:8], "parent_id": row["parent_id"], "depth": row["depth"],
                      "plan": meta.get("head") or meta.get("first_plan") or (row.get("plan") or "")[:30], "status": row["status"],
                      "reason": row.get("reason") or "", "speedup": row["speedup"], "code_hash": row["code_hash"], "code": row.get("code") or "",
                      "duplicate_of": meta.get("duplicate_of")})
    correct = [n for n in nodes if n["status"] == "correct"]
    measured = [n for n in correct if n["speedup"] is not None]
    best = max(measured, key=lambda n: n["speedup"]) if measured else (correct[0] if correct else None)
    by_id = {n["id"]: n for n in nodes}
    lineage = []
    cur = best
    while cur is not None:
        lineage.append(cur)
        cur = by_id.get(cur["parent_id"]) if cur["parent_id"] else None
    return {"run": {k: run[k] for k in ("id", "mode", "status", "reason", "config", "started_at", "finished_at")},
            "task": task["name"] if task else None, "best": best, "lineage": lineage[::-1],
            "nodes": [{k: v for k, v in n.items() if k != "code"} for n in nodes]}


def _fmt(speedup: Any) -> str:
    return f"{speedup:.2f}x" if speedup is not None else "-"
