"""mk's own modules import each other without a cycle (issue 26): every import counts, at the top of a module or
inside a function, since a function-level import only hides a cycle until the function runs. The modules are read
as source under their installed names (pyproject's package-dir: programs/ is mk.programs, and so on)."""

from __future__ import annotations

import ast
import tomllib
from pathlib import Path


ROOT = Path(__file__).resolve().parents[1]


def modules() -> dict[str, Path]:
    """Installed module name -> source file, for every package folder pyproject maps (data/ holds no code)."""
    dirs = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["setuptools"]["package-dir"]
    found: dict[str, Path] = {}
    for package, folder in dirs.items():
        for path in sorted((ROOT / folder).rglob("*.py")):
            parts = list(path.relative_to(ROOT / folder).with_suffix("").parts)
            if parts[-1] == "__init__":
                parts = parts[:-1]
            name = ".".join([package, *parts])
            found.setdefault(name, path)
    return found


def _nodes(tree: ast.AST) -> list[ast.AST]:
    """Every node of ``tree`` but those under ``if TYPE_CHECKING:`` (annotations only: never run)."""
    out, todo = [], [tree]
    while todo:
        node = todo.pop()
        out.append(node)
        if isinstance(node, ast.If) and "TYPE_CHECKING" in ast.unparse(node.test):
            todo.extend(node.orelse)
            continue
        todo.extend(ast.iter_child_nodes(node))
    return out


def imports(name: str, path: Path, known: dict[str, Path]) -> set[str]:
    """The modules of ``known`` that ``name`` imports anywhere in its source, at the top or in a function (a
    package's own submodules excluded; ``if TYPE_CHECKING:`` blocks never run, so they do not count)."""
    package = name if path.name == "__init__.py" else name.rpartition(".")[0]
    out: set[str] = set()
    for node in _nodes(ast.parse(path.read_text(encoding="utf-8"))):
        wanted: list[str] = []
        if isinstance(node, ast.Import):
            wanted = [a.name for a in node.names]
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                parts = package.split(".")[:len(package.split(".")) - node.level + 1]
                base = ".".join(parts + ([base] if base else []))
            wanted = [f"{base}.{a.name}" if f"{base}.{a.name}" in known else base for a in node.names]
        for target in wanted:
            while target and target not in known:
                target = target.rpartition(".")[0]
            if target and target != name and not target.startswith(name + "."):
                out.add(target)
    return out


def cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """The strongly connected components of more than one module (Tarjan's algorithm, iterative)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on: set[str] = set()
    found: list[list[str]] = []
    for root in sorted(graph):
        if root in index:
            continue
        work = [(root, iter(sorted(graph[root])))]
        index[root] = low[root] = len(index)
        stack.append(root)
        on.add(root)
        while work:
            v, edges = work[-1]
            w = next(edges, None)
            if w is not None:
                if w not in index:
                    index[w] = low[w] = len(index)
                    stack.append(w)
                    on.add(w)
                    work.append((w, iter(sorted(graph.get(w, ())))))
                elif w in on:
                    low[v] = min(low[v], index[w])
                continue
            work.pop()
            if work:
                low[work[-1][0]] = min(low[work[-1][0]], low[v])
            if low[v] == index[v]:
                comp = []
                while True:
                    w = stack.pop()
                    on.discard(w)
                    comp.append(w)
                    if w == v:
                        break
                if len(comp) > 1:
                    found.append(sorted(comp))
    return found


def graph_of(known: dict[str, Path]) -> dict[str, set[str]]:
    return {name: imports(name, path, known) for name, path in known.items()}


def test_no_import_cycle_in_mk_programs_signatures_or_retrievers():
    known = modules()
    assert {"mk.harness.evaluate", "mk.programs.auto", "mk.signatures", "mk.retrievers"} <= set(known)
    graph = graph_of(known)
    found = cycles(graph)
    assert not found, "import cycles (a -> b means a imports b):\n" + "\n".join(
        "  " + "; ".join(f"{a} -> {', '.join(sorted(graph[a] & set(c)))}" for a in c) for c in found)


def test_the_run_service_never_imports_the_loops():
    """The direction is contracts <- core <- loops (mk.programs, mk.run) <- entry points, and mk.run is below
    mk.programs: the run service is what the loops use, never the other way round."""
    known = modules()
    graph = graph_of(known)
    bad = sorted(f"{m} -> {t}" for m in known if m == "mk.run" or m.startswith("mk.run.")
                 for t in graph[m] if t.startswith(("mk.programs", "mk.authors", "mk.api", "mk.cli", "mk.commands")))
    assert not bad, bad


def test_the_contracts_import_nothing_of_mk_but_the_errors():
    known = modules()
    assert imports("mk.contracts", known["mk.contracts"], known) <= {"mk.errors"}, \
        "mk.contracts is a leaf: the types it names from the rest of mk are annotations (TYPE_CHECKING) only"


def test_the_cycle_finder_finds_a_cycle_through_a_function_level_import(tmp_path):
    """The finder itself: a cycle that exists only through an import inside a function is found."""
    (tmp_path / "a.py").write_text("import b\n")
    (tmp_path / "b.py").write_text("def f():\n    from a import x\n    return x\n")
    (tmp_path / "c.py").write_text("import a\nfrom typing import TYPE_CHECKING\nif TYPE_CHECKING:\n    import d\n")
    (tmp_path / "d.py").write_text("import c\n")  # c -> d only for annotations: no cycle
    known = {p.stem: p for p in tmp_path.glob("*.py")}
    assert cycles(graph_of(known)) == [["a", "b"]]
