"""``mk kb``: the knowledge store — add documentation, search it, inspect and rebuild the index."""

from __future__ import annotations

import argparse
import json


def register(subparsers: argparse._SubParsersAction) -> None:
    p = subparsers.add_parser("kb", help="search and extend the knowledge store (Pallas/JAX docs + handbook)")
    p.add_argument("--kb", metavar="DIR", default=None, help="store folder (default: $MK_KB_DIR, else kb/ beside the DB)")
    p.add_argument("--no-builtin", action="store_true", help="leave out the built-in corpus (JAX docstrings + handbook)")
    sub = p.add_subparsers(dest="kb_command", metavar="ACTION")

    a = sub.add_parser("add", help="ingest a folder (or file) of .md/.rst/.ipynb docs and rebuild the index")
    a.add_argument("path")
    a.add_argument("--include-code", action="store_true", help="keep hand-written kernel code blocks and .py files (dropped by default)")
    a.add_argument("--json", action="store_true", help="print the ingest report as JSON")
    a.set_defaults(func=_add)

    s = sub.add_parser("search", help="the best passages for a query")
    s.add_argument("query", nargs="+")
    s.add_argument("--k", type=int, default=5, help="number of passages (default 5)")
    s.add_argument("--json", action="store_true", help="print passages as JSON")
    s.set_defaults(func=_search)

    st = sub.add_parser("stats", help="what the store holds")
    st.add_argument("--json", action="store_true")
    st.set_defaults(func=_stats)

    r = sub.add_parser("rebuild", help="re-read every source and rebuild the index")
    r.add_argument("--json", action="store_true")
    r.set_defaults(func=_rebuild)

    ls = sub.add_parser("lessons", help="what past runs learned (fixes that resolved errors, plans that worked); drop one")
    ls.add_argument("--kind", choices=["fix", "plan"], default=None, help="only this kind")
    from mk.targets import target_names

    ls.add_argument("--target", choices=target_names(), default=None, help="only lessons for this target")
    ls.add_argument("--drop", metavar="ID", default=None, help="drop the lesson with this id (or unique prefix): never retrieved again")
    ls.add_argument("--all", action="store_true", help="also list dropped lessons")
    ls.add_argument("--db", default=None, help="DuckDB file (default: $MK_DB or ~/.mk/mk.duckdb)")
    ls.add_argument("--json", action="store_true", help="print the lessons as JSON")
    ls.set_defaults(func=_lessons)

    p.set_defaults(func=lambda args: (p.print_help(), 2)[1])


def _store(args: argparse.Namespace):
    from mk.retrievers import KnowledgeStore

    return KnowledgeStore.open(args.kb, builtin=False if args.no_builtin else None)


def _console():
    from rich.console import Console

    return Console(highlight=False)


def _add(args: argparse.Namespace) -> int:
    report = _store(args).add(args.path, include_code=args.include_code)
    if args.json:
        print(report.model_dump_json(indent=2))
    else:
        _console().print(
            f"added {report.path}: {report.files} files, {report.passages} passages"
            f" ({report.code_blocks_dropped} kernel code blocks left out"
            f"{'' if args.include_code else '; --include-code keeps them'})"
        )
        for f in report.failed:
            _console().print(f"[yellow]skipped[/] {f} (unreadable)")
    return 0


def _search(args: argparse.Namespace) -> int:
    hits = _store(args).search(" ".join(args.query), k=args.k)
    if args.json:
        print(json.dumps([h.model_dump() for h in hits], indent=2))
        return 0
    con = _console()
    if not hits:
        con.print("no matching passages")
        return 1
    for n, h in enumerate(hits, 1):
        con.print(f"[bold]{n}. {h.title}[/]  [dim]{h.ref} · {h.source} · score {h.score:.2f}[/]")
        snippet = " ".join(h.text.split())
        con.print(snippet[:300] + (" …" if len(snippet) > 300 else ""), markup=False)
        con.print()
    return 0


def _print_stats(stats, as_json: bool) -> None:
    if as_json:
        print(stats.model_dump_json(indent=2))
        return
    con = _console()
    con.print(f"knowledge store {stats.kb_dir}: {stats.passages} passages from {stats.documents} documents (built {stats.built_at})")
    for src, n in sorted(stats.sources.items()):
        con.print(f"  {n:6d}  {src}", markup=False)


def _stats(args: argparse.Namespace) -> int:
    _print_stats(_store(args).stats(), args.json)
    return 0


def _rebuild(args: argparse.Namespace) -> int:
    _print_stats(_store(args).rebuild(), args.json)
    return 0


def _lessons(args: argparse.Namespace) -> int:
    from mk.commands._console import console
    from mk.commands.runs import read_store

    if args.drop:
        from mk.store import Store

        with read_store(args.db), Store.open(args.db) as store:
            row = store.drop_lesson(args.drop)
        print(json.dumps({"dropped": row["id"]}) if args.json else f"dropped lesson {row['id']} ({row['kind']}, task {row['task']})")
        return 0
    with read_store(args.db) as store:
        rows = store.lessons(kind=args.kind, target=args.target, dropped=args.all)
    if args.json:
        print(json.dumps(rows, default=str))
        return 0
    if not rows:
        console().print("no lessons yet: runs keep one when a fix resolves an error or a plan gives a correct kernel")
        return 0
    from rich.table import Table

    table = Table("id", "kind", "target", "task", "shape class", "what", "from run", "speedup")
    for r in rows:
        what = (r["problem"].strip().splitlines() or [""])[-1][:70] if r["kind"] == "fix" else r["lesson"][:70]
        speed = f"{r['speedup']:.2f}x" if r.get("speedup") is not None else "-"
        table.add_row(r["id"][:10] + (" (dropped)" if r.get("dropped") else ""), r["kind"], r["target"], r["task"],
                      r["shape_class"], what, str(r.get("run_id") or "")[:12], speed)
    console().print(table)
    return 0
