"""Lessons: what past runs learned, kept in the store and given to the fixer and the planner of later runs.

Two kinds, both with their provenance (run, node, task, target, shape class):

* ``fix`` — a compile error or static-check rejection and the change that resolved it (a diff of the candidate
  before and after the fix that then passed its first case). Recorded by Auto when a fixed candidate validates.
* ``plan`` — a plan that produced a correct kernel, with its measured speedup (or "not measured") per target and
  shape class. Recorded by Auto at each correct snapshot.

:func:`recall` ranks the live lessons of a kind for a query (the error text for a fixer; the task's name and the
primitives its reference uses for a planner) by shared identifiers, weighted by how rare each is among the lessons,
and returns them as text for a prompt. ``mk kb lessons`` lists them; ``mk kb lessons --drop ID`` drops one.
"""

from __future__ import annotations

import difflib
import logging
import math
import re
from collections import Counter
from typing import Any, Iterable

log = logging.getLogger(__name__)

_WORD = re.compile(r"[A-Za-z_][A-Za-z0-9_]{2,}")
_STOP = frozenset("""the and for with that this from not are was were has have had but its into than then when where which
while who will would can could should into onto over under your you our their them they file line error got int
float none true false self return def import jax jnp numpy pallas kernel candidate""".split())


def words(text: str) -> Counter[str]:
    """The identifiers of ``text`` that carry meaning (numbers, shapes and common words left out)."""
    return Counter(w for w in (m.group(0).lower() for m in _WORD.finditer(text or "")) if w not in _STOP)


def shape_class(task: Any, scale: str | None = None) -> str:
    """A coarse class of the task's inputs: ranks, dtypes and the order of magnitude of the largest input."""
    try:
        structs = task.arg_structs(scale)
    except Exception:  # noqa: BLE001 - a task whose shapes cannot be resolved still gets a class
        return "unknown"
    ranks = "/".join(str(len(s.shape)) for s in structs)
    dtypes = "/".join(sorted({str(s.dtype) for s in structs}))
    biggest = max((math.prod(s.shape) for s in structs), default=1)
    return f"rank {ranks}; {dtypes}; ~1e{int(math.log10(max(biggest, 1)))} elements"


def task_words(task: Any) -> str:
    """The task's name and the primitives of its reference at its default scale: what a similar task shares."""
    import jax

    prims: list[str] = []
    try:
        closed = jax.make_jaxpr(task.bind(task.reference))(*task.arg_structs())
        prims = sorted({str(e.primitive) for e in closed.jaxpr.eqns})
    except Exception:  # noqa: BLE001 - a reference that cannot be traced abstractly is known by its name
        pass
    return " ".join([re.sub(r"[^A-Za-z0-9]+", " ", task.name), *prims])


def fix_diff(before: str, after: str, *, limit: int = 60) -> str:
    """The fix as a unified diff (at most ``limit`` lines)."""
    lines = list(difflib.unified_diff(before.splitlines(), after.splitlines(), "before.py", "after.py", lineterm="", n=1))
    return "\n".join(lines[:limit]) + ("\n... (diff cut)" if len(lines) > limit else "")


def record_fix(store: Any, *, task: Any, target: str, error: str, before: str, after: str, run_id: str | None,
               node_id: str | None) -> str | None:
    """Keep a fix that resolved ``error`` (the candidate then validated)."""
    if store is None or not error or before == after:
        return None
    try:
        problem, lesson = error[-2000:], fix_diff(before, after)
        if _known(store, "fix", target, problem, lesson):
            return None
        return store.add_lesson(kind="fix", target=target, task=task.name, shape_class=shape_class(task),
                                problem=problem, lesson=lesson, status="validated", run_id=run_id, node_id=node_id)
    except Exception as exc:  # noqa: BLE001 - a lesson not kept must not end the run
        log.warning("could not keep the lesson from this fix: %s", exc)
        return None


def record_plan(store: Any, *, task: Any, target: str, plan: str, speedup: float | None, run_id: str | None,
                node_id: str | None) -> str | None:
    """Keep a plan that produced a correct kernel, with its speedup (None: not measured here)."""
    if store is None or not plan.strip():
        return None
    try:
        problem = task_words(task)
        if _known(store, "plan", target, problem, plan[:2000], speedup):
            return None
        return store.add_lesson(kind="plan", target=target, task=task.name, shape_class=shape_class(task),
                                problem=problem, lesson=plan[:2000], status="correct", speedup=speedup,
                                run_id=run_id, node_id=node_id)
    except Exception as exc:  # noqa: BLE001
        log.warning("could not keep the lesson from this plan: %s", exc)
        return None


def _known(store: Any, kind: str, target: str, problem: str, lesson: str, speedup: float | None = None) -> bool:
    """True when a live lesson already says this (the same problem and lesson, and for a plan no better speedup): the
    same mistake fixed the same way in every run must not fill the fixer's few lesson slots with copies."""
    for r in store.lessons(kind=kind, target=target):
        if r.get("problem") == problem and r.get("lesson") == lesson:
            if speedup is None or (r.get("speedup") is not None and r["speedup"] >= speedup):
                return True
    return False


class LessonBuffer:
    """Lessons for a process that holds no store (a search worker): it reads the live lessons it was given and
    keeps the new ones for the process that writes the store (``new``: :meth:`mk.store.Store.add_lesson`'s keywords,
    without ``run_id``/``node_id``, which the writer fills)."""

    def __init__(self, rows: Iterable[dict[str, Any]] = ()):
        self.rows = [dict(r) for r in rows]
        self.new: list[dict[str, Any]] = []

    def lessons(self, *, kind: str | None = None, target: str | None = None, dropped: bool = False) -> list[dict[str, Any]]:
        return [r for r in self.rows if (kind is None or r.get("kind") == kind) and (target is None or r.get("target") == target)
                and (dropped or not r.get("dropped"))]

    def add_lesson(self, **row: Any) -> str:
        kept = {k: v for k, v in row.items() if k not in ("run_id", "node_id")}
        self.new.append(kept)
        ident = f"pending-{len(self.new)}"
        self.rows.insert(0, {**kept, "id": ident, "run_id": row.get("run_id"), "node_id": row.get("node_id"), "dropped": False})
        return ident


def rank(query: str, lessons: Iterable[dict[str, Any]], k: int = 3) -> list[dict[str, Any]]:
    """The ``k`` lessons sharing the most meaningful identifiers with ``query`` (rare ones count more)."""
    rows = list(lessons)
    q = words(query)
    if not q or not rows:
        return []
    docs = [words(r["problem"] + " " + r["task"]) for r in rows]
    df = Counter(w for d in docs for w in d)
    n = len(rows)
    scored = []
    for r, d in zip(rows, docs):
        shared = set(q) & set(d)
        score = sum(math.log(1 + n / df[w]) for w in shared) / math.sqrt(1 + len(d))
        if len(shared) >= 2:  # one common word is not a similarity
            scored.append((score, r))
    scored.sort(key=lambda sr: -sr[0])
    return [r for _, r in scored[:k]]


def recall(store: Any, query: str, *, kind: str, target: str, exclude_run: str | None = None, k: int = 3) -> str:
    """Prompt text for the best ``k`` live lessons of ``kind`` on ``target`` for ``query`` ("" when none)."""
    if store is None:
        return ""
    try:
        rows, seen = [], set()
        for r in store.lessons(kind=kind, target=target):  # newest first; a copy of a kept lesson adds nothing
            if (exclude_run is None or r.get("run_id") != exclude_run) and (r.get("problem"), r.get("lesson")) not in seen:
                seen.add((r.get("problem"), r.get("lesson")))
                rows.append(r)
    except Exception as exc:  # noqa: BLE001 - an old store without the table, a locked one: no lessons, not a failure
        log.debug("no lessons: %s", exc)
        return ""
    return "\n\n".join(describe(r) for r in rank(query, rows, k))


def describe(row: dict[str, Any]) -> str:
    """One lesson as prompt text, with where it came from."""
    where = f"lesson {row['id'][:8]} from run {str(row.get('run_id') or '?')[:12]} (task {row['task']}, {row['target']}, " \
            f"{row['shape_class']})"
    if row["kind"] == "fix":
        return f"{where}: this error\n{row['problem'][-600:]}\nwas resolved by this change:\n{row['lesson']}"
    speed = f"{row['speedup']:.2f}x" if row.get("speedup") is not None else "correct, speed not measured"
    return f"{where}: this plan gave {speed}:\n{row['lesson'][:800]}"
