"""Candidates: Python source that defines the kernel entry point.

The judge never imports a candidate. :func:`load_candidate` reads the file
and parses it with :mod:`ast` to find the entry (``kernel``, else the
JAXBench/MaxKernel names ``workload`` or ``computation``) and a literal
``CONFIG_SPACE``; the code itself only ever runs inside the sandbox worker.
"""

from __future__ import annotations

import ast
import hashlib
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Mapping

from mk.errors import CandidateError

#: Entry-point names, in order of preference.
ENTRY_NAMES = ("kernel", "workload", "computation")


@dataclass(frozen=True)
class Candidate:
    """A candidate's source text and what the judge learned from parsing it."""

    source: str
    entry: str
    path: Path | None = None
    config_space: Mapping[str, tuple[Any, ...]] = field(default_factory=dict)

    @property
    def digest(self) -> str:
        """Short sha256 of the source: identifies this exact code."""
        return hashlib.sha256(self.source.encode()).hexdigest()[:16]

    @classmethod
    def from_source(cls, source: str, *, path: Path | None = None) -> "Candidate":
        """Parse ``source`` (never executing it) into a Candidate."""
        where = str(path) if path else "<candidate source>"
        try:
            tree = ast.parse(source, filename=where)
        except (SyntaxError, RecursionError, MemoryError):
            # code that does not parse is a verdict (compile_error / rejected from the judge's static check), not bad
            # input: an author's broken attempt must be judged and recorded like any other
            return cls(source=source, entry=ENTRY_NAMES[0], path=path)
        names = _top_level_names(tree)
        entry = next((n for n in ENTRY_NAMES if n in names), None)
        if entry is None:
            raise CandidateError(
                f"{where} defines none of {', '.join(ENTRY_NAMES)}",
                hint="define `def kernel(*inputs, **tunables)` with the reference's signature",
                path=path,
            )
        return cls(source=source, entry=entry, path=path, config_space=_config_space(tree, where))


def load_candidate(path: str | Path) -> Candidate:
    """Read a candidate file; raise :class:`CandidateError` saying what to do when it cannot be used."""
    p = Path(path)
    if not p.is_file():
        raise CandidateError(f"candidate file {p} does not exist", hint="pass the path of a .py file that defines `kernel`", path=p)
    try:
        source = p.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as exc:
        raise CandidateError(f"cannot read candidate {p}: {exc}", hint="check the file's permissions and encoding (UTF-8)", path=p) from None
    return Candidate.from_source(source, path=p.resolve())


def _top_level_names(tree: ast.Module) -> set[str]:
    names: set[str] = set()
    for node in tree.body:
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            names.add(node.name)
        elif isinstance(node, ast.Assign):
            names.update(t.id for t in node.targets if isinstance(t, ast.Name))
        elif isinstance(node, ast.AnnAssign) and isinstance(node.target, ast.Name):
            names.add(node.target.id)
        elif isinstance(node, (ast.Import, ast.ImportFrom)):
            names.update((a.asname or a.name).split(".")[0] for a in node.names)
    return names


def _config_space(tree: ast.Module, where: str) -> dict[str, tuple[Any, ...]]:
    """The literal ``CONFIG_SPACE = {name: [values...]}``, or ``{}`` when absent."""
    value: ast.expr | None = None
    for node in tree.body:
        if isinstance(node, ast.Assign) and any(isinstance(t, ast.Name) and t.id == "CONFIG_SPACE" for t in node.targets):
            value = node.value
        elif isinstance(node, ast.AnnAssign) and isinstance(node.target, ast.Name) and node.target.id == "CONFIG_SPACE":
            value = node.value
    if value is None:
        return {}
    try:
        space = ast.literal_eval(value)
    except (ValueError, SyntaxError, TypeError):
        raise CandidateError(
            f"{where}: CONFIG_SPACE is not a literal",
            hint='write it as a literal dict such as {"block_m": [128, 256]} (no names or calls)',
        ) from None
    if not isinstance(space, dict) or not all(isinstance(k, str) for k in space):
        raise CandidateError(f"{where}: CONFIG_SPACE must be a dict of parameter name -> list of values")
    out: dict[str, tuple[Any, ...]] = {}
    for k, v in space.items():
        if not isinstance(v, (list, tuple)) or not v:
            raise CandidateError(f"{where}: CONFIG_SPACE[{k!r}] must be a non-empty list of values, got {v!r}")
        out[k] = tuple(v)
    return out
