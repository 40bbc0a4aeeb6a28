"""``mk tasks PATH``: list the tasks a path holds, with shapes, dtypes and tolerances.

Nothing is allocated: shapes come from tracing each task's own input
generator. A task that fails to load is listed with its error (exit code 1).
"""

from __future__ import annotations

import argparse
import json
import re
import sys
from typing import Any

from mk.errors import TaskError


def register(subparsers: Any) -> None:
    p = subparsers.add_parser(
        "tasks",
        help="list the tasks a path holds (shapes, dtypes, tolerances)",
        description="List tasks: a task file or directory, a dataset directory of MaxKernel task dirs, JAXBench "
        "baseline.py files or mk task modules, 'jaxbench' (the built-in suite) or 'jaxbench:<id>'.",
    )
    p.add_argument("path", help="task path, dataset directory, 'jaxbench' or 'jaxbench:<id>'")
    p.add_argument("--json", action="store_true", help="print a JSON list of task descriptions instead of a table")
    p.add_argument("--scale", metavar="NAME", default=None, help="show only this scale (e.g. full, ci)")
    p.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    from mk.loaders import discover, load_ref

    entries: list[dict[str, Any]] = []
    for ref in discover(args.path):
        try:
            task = load_ref(ref)
            entry = task.describe()
        except TaskError as err:
            entries.append({"name": ref.name, "id": ref.id, "kind": ref.kind, "source": str(ref.path) if ref.path else None,
                            "error": str(err)})
            continue
        entry["id"] = ref.id
        entry["locator"] = dict(task.locator)
        if args.scale is not None:
            entry["scales"] = {k: v for k, v in entry["scales"].items() if k == args.scale}
            if not entry["scales"]:
                entry["note"] = f"no scale {args.scale!r}; it has {', '.join(task.scales)}"
        entries.append(entry)
    if args.json:
        sys.stdout.write(json.dumps(entries, indent=2) + "\n")
    else:
        _table(entries, args.path)
    from pathlib import Path

    if entries and all("error" in e for e in entries) and Path(args.path).is_file():
        return 2  # a broken task file is a usage error, as `mk optimize FILE` says too
    return 1 if any("error" in e for e in entries) else 0


def _table(entries: list[dict[str, Any]], path: str) -> None:
    from mk.commands._console import console as make_console
    from rich.table import Table

    table = Table(title=f"tasks in {path}", show_lines=True)
    table.add_column("task", overflow="fold", min_width=10)
    table.add_column("kind", no_wrap=True)
    table.add_column("scale", no_wrap=True)
    table.add_column("inputs", overflow="fold", min_width=18)
    table.add_column("atol\nrtol", overflow="fold", min_width=6)
    table.add_column("static", overflow="fold", min_width=8)
    for e in entries:
        if "error" in e:
            continue
        static = ", ".join(f"{k}={v}" for k, v in e["static"].items())
        tol = f"{_num(e['atol'])}\n{_num(e['rtol'])}"
        # the task's name (what reports and --json call it), and the id that loads it where that differs
        label = _escape(e["name"]) + (f"\n[dim]id: {_escape(e['id'])}[/]" if e["id"] != e["name"] else "")
        if not e["scales"]:
            table.add_row(label, e["kind"], "", f"[dim]{_escape(e.get('note', ''))}[/]", tol, _escape(static))
        for scale, shapes in e["scales"].items():
            inputs = "\n".join(f"{a['name']}: {_short(a['dtype'])}[{','.join(map(str, s))}]" + (" (native)" if a["init"] == "native" else "")
                               for a, s in zip(e["inputs"], shapes))
            table.add_row(label, e["kind"], scale, _escape(inputs), tol, _escape(static))
    failed = [e for e in entries if "error" in e]
    table.caption = f"{len(entries)} task(s)" + (f", {len(failed)} failed to load (below)" if failed else "")
    console = make_console()
    console.print(table)
    for e in failed:
        console.print(f"[bold red]error[/] {_escape(e['id'])} ({e['kind']}): {_escape(e['error'])}")


def _short(dtype: str) -> str:
    m = re.fullmatch(r"(bfloat|float|uint|int|complex)(\d+)(.*)", dtype)
    if not m:
        return dtype
    return {"bfloat": "bf", "float": "f", "uint": "u", "int": "i", "complex": "c"}[m.group(1)] + m.group(2) + m.group(3)


def _num(v: Any) -> str:
    return ",".join(f"{x:g}" for x in v) if isinstance(v, list) else f"{v:g}" if isinstance(v, (int, float)) else str(v)


def _escape(text: str) -> str:
    from rich.markup import escape

    return escape(text)
