"""`mk runs`, `mk show RUN [--json]`, `mk resume RUN`: browse and continue what the store holds."""

from __future__ import annotations

import argparse
import json
from typing import Any


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("runs", help="list the runs in the store, newest first")
    p.add_argument("--limit", type=int, default=30)
    p.add_argument("--db", default=None, help="DuckDB file (default: $MK_DB or ~/.mk/mk.duckdb)")
    p.add_argument("--json", action="store_true", help="print the runs as JSON")
    p.set_defaults(func=list_runs)

    p = sub.add_parser("show", help="one run: its best node, the best node's lineage and every node's verdict")
    p.add_argument("run", help="a run id (or a unique prefix of one)")
    p.add_argument("--db", default=None)
    p.add_argument("--json", action="store_true", help="print the run as JSON")
    p.add_argument("--code", action="store_true", help="also print the best node's code")
    p.set_defaults(func=show)

    p = sub.add_parser("resume", help="continue a search run that was interrupted: completed nodes are kept, missing ones run")
    p.add_argument("run", help="a run id (or a unique prefix of one)")
    p.add_argument("--db", default=None)
    p.add_argument("--workers", choices=["process", "inline", "ray"], default=None, help="override the run's worker backend")
    p.add_argument("--max-workers", type=int, default=None)
    p.add_argument("--json", action="store_true", help="print the resumed run's summary as JSON")
    p.set_defaults(func=resume)


def list_runs(args: argparse.Namespace) -> int:
    from rich.console import Console
    from rich.table import Table

    from mk.store import Store

    with Store.open(args.db) as store:
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

    from mk.store import Store

    with Store.open(args.db) as store:
        run = _find_run(store, args.run)
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
    from mk.programs.search import Search
    from mk.store import Store

    overrides: dict[str, Any] = {}
    if args.workers:
        overrides["workers"] = args.workers
    if args.max_workers:
        overrides["max_workers"] = args.max_workers
    with Store.open(args.db) as store:
        run = _find_run(store, args.run)
        before = len(store.nodes(run["id"]))
        result = Search.resume(run["id"], store=store, **overrides)
    best = result.best
    summary = {"run_id": result.run_id, "status": result.status, "nodes": len(result.nodes), "resumed_from": before,
               "best_node": best.key if best else None, "speedup": best.speedup if best else None, "stop_reason": result.stop_reason}
    if args.json:
        print(json.dumps(summary))
    else:
        print(f"run {result.run_id}: {result.status}; {len(result.nodes)} nodes ({before} kept, {len(result.nodes) - before} new); "
              f"{result.stop_reason}")
    return 0 if best else 1


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


def _find_run(store: Any, ident: str) -> dict[str, Any]:
    from mk.errors import StoreError

    run = store.get_run(ident)
    if run is not None:
        return run
    rows = store.query("SELECT id FROM runs WHERE id LIKE ? ORDER BY started_at DESC", [ident + "%"])
    if len(rows) != 1:
        raise StoreError(f"{'no' if not rows else 'more than one'} run matches {ident!r} in {store.path}",
                         hint="`mk runs` lists the runs; give more of the id")
    return store.get_run(rows[0]["id"])


def _fmt(speedup: Any) -> str:
    return f"{speedup:.2f}x" if speedup is not None else "-"
