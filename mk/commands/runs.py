"""`mk runs`, `mk show RUN [--json]`, `mk resume RUN`: browse and continue what the store holds."""

from __future__ import annotations

import argparse
import json
from typing import Any

from mk.commands._flags import add_budget_flags, budget_from


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
    p.add_argument("--lm", default=None, help="another author than the run's own (default: the run's author, rebuilt from the store)")
    p.add_argument("--out", default=None, help="folder for the best kernel and the report (default: the run's own --out)")
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


def progress_rows(db: str | None) -> list[dict[str, Any]]:
    """The runs as their writers' progress files say (``<store>.runs/*.json``), newest first: what a read command
    shows while another process holds the store (a run whose writer is gone shown ``killed``)."""
    from mk.store import progress_folder, read_progress

    rows = [told(r, r, store_readable=False, db=db) for r in read_progress(progress_folder(db))]
    return sorted(rows, key=lambda r: str(r.get("started_at")), reverse=True)


def told(row: dict[str, Any], progress: dict[str, Any] | None, *, store_readable: bool, db: Any) -> dict[str, Any]:
    """``row`` (a run) as a read command shows it: a ``running`` run whose process is gone is ``killed``
    (:func:`mk.store.shown_status`), with the command that continues it as its reason; the stored status is kept
    as ``stored_status``. The store is not touched."""
    from mk.store import killed_reason, shown_status

    status = shown_status(row.get("status"), progress, store_readable=store_readable)
    if status == row.get("status"):
        return row
    from mk.run.service import db_flag, resume_command

    db = db if db is not None else _default_db()
    config = row.get("config") if isinstance(row.get("config"), dict) else {}
    bench = (progress or {}).get("bench") or (config.get("settings") or {}).get("bench")
    if row.get("mode") == "bench" and bench:
        resume = f"mk bench --resume {bench}{db_flag(db)}"
    else:
        locator = config.get("locator") or ({"kind": row["task_kind"]} if row.get("task_kind") else None)
        resume = resume_command(row["id"], row.get("mode"), locator, db)
    return {**row, "status": status, "stored_status": row.get("status"), "reason": killed_reason(progress, resume)}


def _default_db() -> Any:
    from mk.store import resolve_path

    return resolve_path(None)


def _locked_note(err: Any) -> str:
    return (f"the store is in use by another mk process ({err.message.split(' (')[0]}); showing what its runs' progress "
            "files say (updated at every snapshot, node and end)")


def list_runs(args: argparse.Namespace) -> int:
    from rich.table import Table

    from mk.commands._console import console
    from mk.errors import StoreLocked
    from mk.store import read_progress

    try:
        with read_store(args.db) as store:
            rows = store.query(
                """SELECT r.id, r.mode, r.status, r.reason, r.started_at, r.finished_at, t.name AS task,
                          json_extract_string(r.config, '$.settings.bench') AS bench,
                          json_extract_string(r.config, '$.locator.kind') AS task_kind,
                          (SELECT count(*) FROM nodes n WHERE n.run_id = r.id) AS nodes,
                          (SELECT max(speedup) FROM nodes n WHERE n.run_id = r.id AND n.status = 'correct') AS best_speedup
                   FROM runs r LEFT JOIN tasks t ON t.fingerprint = r.task_fingerprint
                   ORDER BY r.started_at DESC LIMIT ?""", [int(args.limit)])
            rows = [told(r, next(iter(read_progress(store.progress_dir, r["id"])), None) if r["status"] == "running" else None,
                         store_readable=True, db=store.path) for r in rows]
    except StoreLocked as err:  # another process is writing: its progress files say where its runs stand
        rows = progress_rows(args.db)[: int(args.limit)]
        if not rows:
            raise
        console(stderr=True).print(f"[yellow]{_locked_note(err)}[/]")
    if args.json:
        print(json.dumps(rows, default=str))
        return 0
    table = Table("run", "task", "mode", "status", "nodes", "best", "started")
    for r in rows:
        best = f"{r['best_speedup']:.2f}x" if r.get("best_speedup") is not None else "-"
        table.add_row(r["id"][:12], r.get("task") or "?", r["mode"], r["status"], str(r.get("nodes", "?")), best,
                      str(r["started_at"])[:19])
    console().print(table if rows else "no runs in the store yet")
    return 0


def show(args: argparse.Namespace) -> int:
    from mk.commands._console import console

    from mk.errors import StoreError, StoreLocked

    try:
        with read_store(args.db) as store:
            from mk.store import read_progress

            run = store.find_run(args.run)
            if run["status"] == "running":
                run = told(run, next(iter(read_progress(store.progress_dir, run["id"])), None), store_readable=True,
                           db=store.path)
            info = describe_run(store, run)
    except StoreLocked as err:  # another process is writing: show what the run's progress file says
        found = [r for r in progress_rows(args.db) if r["id"].startswith(args.run)]
        if len(found) != 1:
            raise StoreError(f"{err.message}; no single run's progress file matches {args.run!r}", hint=err.hint) from None
        if args.json:
            print(json.dumps({"progress": found[0], "note": _locked_note(err)}, default=str))
            return 0
        r = found[0]
        console(stderr=True).print(f"[yellow]{_locked_note(err)}[/]")
        console().print(f"run {r['id']} ({r['mode']}, task {r.get('task') or '?'}): {r['status']}; {r.get('snapshots', 0)} "
                        f"snapshots, {r.get('nodes', 0)} nodes, best {_fmt(r.get('best_speedup'))}; updated {str(r['updated_at'])[:19]}"
                        + ("\n  " + r["reason"].replace("\n", "\n  ") if r.get("reason") else ""), markup=False)
        return 0
    if args.json:
        print(json.dumps(info, default=str))
        return 0
    from rich.markup import escape

    from mk.commands._console import is_terminal

    con = console()
    whole = not is_terminal(con)  # piped or redirected: reasons whole, lines never wrapped (a reader or grep gets them all)
    con.print(f"[bold]run {run['id']}[/] ({run['mode']}, task {info['task'] or '?'}): {run['status']}")
    if run.get("reason"):
        con.print("  " + escape(run["reason"]).replace("\n", "\n  "), soft_wrap=whole)  # a table's rows under its head
    cfg = info["config"]
    budget = ", ".join(f"{k.replace('max_', '')} {v}" for k, v in (cfg.get("budget") or {}).items() if v is not None) or "none"
    con.print(f"config: target {cfg.get('target')} · scales {', '.join(cfg.get('scales') or []) or '?'} · author "
              f"{cfg.get('author_name') or cfg.get('author') or '?'} · iterations {cfg.get('iterations')} · budget {budget}"
              + (f" · {json.dumps(cfg['settings'])}" if cfg.get("settings") else ""), markup=False)
    spend = info["lm_spend"]
    if spend.get("calls"):
        con.print(f"LM spend: {spend['calls']} calls ({spend['errors']} failed, {spend['cache_hits']} cached), "
                  f"{spend['input_tokens']} in / {spend['output_tokens']} out tokens, ${spend['cost_usd']:.4f}")
    best = info["best"]
    if best:
        con.print(f"[bold]best node[/] {best['key']} ({best['id'][:12]}): {best['status']}, speedup {_fmt(best['speedup'])}")
        if best.get("plan_text"):
            con.print("  plan: " + best["plan_text"], markup=False, soft_wrap=whole)
        if best.get("config"):
            con.print(f"  tuned config: {json.dumps(best['config'])}", markup=False)
        con.print(f"  kernel: {info['kernel_path']}" if info.get("kernel_path") else
                  f"  kernel: not written to a file (mk show {run['id'][:12]} --code prints it)", markup=False)
        con.print("lineage: " + " -> ".join(f"{n['key']} [{n['plan']}: {n['status']} {_fmt(n['speedup'])}]" for n in info["lineage"]),
                  markup=False, soft_wrap=whole)
    for n in info["nodes"]:
        con.print(f"  {'  ' * max(n['depth'] - 1, 0)}{n['key']:<10} {n['plan']:<18} {n['status']:<14} {_fmt(n['speedup']):>8}  "
                  f"{n['reason'] if whole else n['reason'].split(chr(10))[0][:160]}", markup=False, soft_wrap=whole)
    if args.code and best:
        con.print(best["code"], markup=False)
    return 0


def resume(args: argparse.Namespace) -> int:
    """Continue a run in its own mode with its stored config; write its kernel and report like the run would have."""
    from mk.programs.modes import resume as resume_run
    from mk.run.output import prepare_output_dir, write_outputs
    from mk.store import Store

    with read_store(args.db) as store:
        row = store.find_run(args.run)
    stored_out = (row.get("config") or {}).get("out")
    out_dir = prepare_output_dir(args.out or stored_out)  # checked before any work
    settings = {k: v for k, v in (("workers", args.workers), ("max_workers", args.max_workers)) if v}
    from mk.commands._console import console
    from mk.commands.optimize import progress_printer

    err = console(stderr=True)  # progress on stderr: stdout keeps the summary (and --json's JSON)
    if row.get("mode") == "hitl":
        err.print(f"run {row['id'][:12]} is a HITL session: mk resume continues it without pausing "
                  f"(mk hitl --resume {row['id'][:12]} continues it interactively)")
    unit = "nodes" if row.get("mode") == "search" else "snapshots"
    with Store.open(args.db) as store:
        count = (lambda: len(store.nodes(row["id"]))) if unit == "nodes" else (lambda: len(store.snapshots(row["id"])))
        before = count()
        run, outcome = resume_run(store, row["id"], lm=args.lm, budget=budget_from(args), settings=settings,
                                  on_event=progress_printer(err))
        report = write_outputs(run, outcome, out_dir)
        after = count()
    summary = {**report.to_dict(), "resumed_from": before, unit: after, "best_node": outcome.best_node,
               "progress": f"{after} {unit} ({before} kept, {after - before} new)"}
    if args.json:
        print(json.dumps(summary, default=str))
    else:
        print(f"run {run.id} ({run.config.mode}): {report.status}; {summary['progress']}; {report.stop_reason}")
        print(f"report: {report.report_path}" + (f"  kernel: {report.kernel_path}" if report.kernel_path else ""))
    return 0 if report.status == "correct" else 1


def describe_run(store: Any, run: dict[str, Any]) -> dict[str, Any]:
    """The run as plain values: its row, every node (key, verdict), the best node and its lineage."""
    from mk.run.best import best_of, tuned_config

    snapshots = store.snapshots(run["id"])  # read once: every node's tuned config comes from them

    task = store.get_task(run["task_fingerprint"]) if run.get("task_fingerprint") else None
    nodes = []
    for row in store.nodes(run["id"]):
        meta = row.get("meta") or {}
        nodes.append({"id": row["id"], "key": meta.get("key") or row["id"][:8], "parent_id": row["parent_id"], "depth": row["depth"],
                      "plan": meta.get("head") or meta.get("first_plan") or (row.get("plan") or "")[:30], "status": row["status"],
                      "reason": row.get("reason") or "", "speedup": row["speedup"], "code_hash": row["code_hash"], "code": row.get("code") or "",
                      "duplicate_of": meta.get("duplicate_of"), "plan_text": row.get("plan") or "",
                      "config": tuned_config(store, run["id"], row, snapshots)})
    best = best_of(nodes)
    by_id = {n["id"]: n for n in nodes}
    lineage = []
    cur = best
    while cur is not None:
        lineage.append(cur)
        cur = by_id.get(cur["parent_id"]) if cur["parent_id"] else None
    config = run.get("config") or {}
    kernel_path = None
    if best is not None and task is not None:
        from pathlib import Path

        target = config.get("target") or (config.get("settings") or {}).get("target") or "tpu"
        candidate = Path(config.get("out") or "mk-out") / f"{task['name']}_{target}.py"
        kernel_path = str(candidate) if candidate.is_file() else None
    return {"run": {k: run[k] for k in ("id", "mode", "status", "reason", "config", "started_at", "finished_at", "stored_status")
                    if k in run},
            "task": task["name"] if task else None, "best": best, "lineage": lineage[::-1], "config": config,
            "lm_spend": store.lm_spend(run["id"]), "kernel_path": kernel_path,
            "nodes": [{k: v for k, v in n.items() if k not in ("code", "plan_text")} for n in nodes]}


def _fmt(speedup: Any) -> str:
    return f"{speedup:.2f}x" if speedup is not None else "-"
