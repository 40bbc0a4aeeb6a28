"""The verified envelope: exactly what a verdict verified, and the rule a caller's inputs must follow to be inside it.

From the judged task (its scales and the suite's held-out scales) and the
frozen suite, per input axis:

* one value at every scale: the axis is **fixed** to it;
* values the held-out scale changed (so a kernel fitted to the author's sizes
  failed): any **multiple** of their gcd, at least their smallest;
* otherwise (several authoring sizes, none held out): **one of** them;

axes equal at every scale must stay equal; dtypes and ranks are fixed. Per
static argument: fixed, one of the verified values, or, where a held-out
scale changed it, any value of its type. The envelope also keeps the verified
points, the tolerance, the case count and the suite hash.

:meth:`Envelope.check` says why given shapes and statics are outside (None
inside). :meth:`Envelope.guard_source` is the same check as plain Python for
the header of a written kernel (it needs nothing but the kernel's own file),
and :meth:`Envelope.lines` says it in words.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any, Mapping, Sequence

import numpy as np


#: the first words of the error a written kernel raises outside its envelope (the judge recognises them)
OUTSIDE = "outside the verified envelope"


@dataclass(frozen=True)
class Axis:
    kind: str  # fixed | multiple | one_of
    values: tuple[int, ...]
    unit: int = 0

    def allows(self, v: int) -> bool:
        if self.kind == "multiple":
            return v >= min(self.values) and v % self.unit == 0
        return v in self.values

    def words(self) -> str:
        if self.kind == "fixed":
            return str(self.values[0])
        if self.kind == "multiple":
            return f"any multiple of {self.unit} >= {min(self.values)} (verified at {', '.join(map(str, self.values))})"
        return "one of " + ", ".join(map(str, self.values))


@dataclass(frozen=True)
class Static:
    name: str
    kind: str  # fixed | one_of | any
    values: tuple[Any, ...]
    type: str = ""

    def allows(self, v: Any) -> bool:
        if self.kind == "any":
            return type(v).__name__ == self.type or (self.type == "float" and isinstance(v, (int, float)) and not isinstance(v, bool))
        return any(_same(v, w) for w in self.values)

    def words(self) -> str:
        if self.kind == "any":
            return f"any {self.type} (verified at {', '.join(map(repr, self.values))})"
        if self.kind == "fixed":
            return repr(self.values[0])
        return "one of " + ", ".join(map(repr, self.values))


@dataclass(frozen=True)
class Envelope:
    names: tuple[str, ...]
    dtypes: tuple[str, ...]
    axes: tuple[tuple[Axis, ...], ...]
    equal: tuple[tuple[tuple[int, int], ...], ...]
    static: tuple[Static, ...]
    points: Mapping[str, Any]
    heldout: tuple[str, ...]
    tolerance: Mapping[str, Any]
    cases: int
    suite_hash: str
    static_as_kwargs: bool = False

    # --- building ------------------------------------------------------------------------
    @classmethod
    def of(cls, task: Any, suite: Any) -> "Envelope":
        """The envelope of ``suite`` on ``task`` (the task without or with the suite's held-out scales)."""
        task = suite.judged(task)
        scales = list(suite.scales)
        held = [s for s in scales if s in suite.heldout_names]
        seen = [s for s in scales if s not in held]
        shapes = {s: task.shapes(s) for s in scales}
        statics = {s: task.static_values(s) for s in scales}
        axes = []
        for i, arg in enumerate(task.args):
            row = []
            for j in range(len(shapes[scales[0]][i])):
                values = tuple(sorted({int(shapes[s][i][j]) for s in scales}))
                authored = {int(shapes[s][i][j]) for s in seen}
                if len(values) == 1:
                    row.append(Axis("fixed", values))
                elif any(int(shapes[s][i][j]) not in authored for s in held):
                    row.append(Axis("multiple", values, math.gcd(*values)))
                else:
                    row.append(Axis("one_of", values))
            axes.append(tuple(row))
        groups: dict[tuple[int, ...], list[tuple[int, int]]] = {}
        for i, row in enumerate(axes):
            for j, ax in enumerate(row):
                if ax.kind != "fixed":
                    groups.setdefault(tuple(int(shapes[s][i][j]) for s in scales), []).append((i, j))
        static = []
        for k, s in enumerate(task.static):
            values = _unique([statics[n][k] for n in scales])
            authored = [statics[n][k] for n in seen]
            if len(values) == 1:
                static.append(Static(s.name, "fixed", tuple(values)))
            elif any(not any(_same(statics[n][k], a) for a in authored) for n in held):
                static.append(Static(s.name, "any", tuple(values), type(values[0]).__name__))
            else:
                static.append(Static(s.name, "one_of", tuple(values)))
        points = {s: {"inputs": [[list(shape), a.dtype] for shape, a in zip(shapes[s], task.args)],
                      "static": {st.name: repr(v) for st, v in zip(task.static, statics[s])}} for s in scales}
        tol = task.tolerance
        return cls(tuple(a.name for a in task.args), tuple(a.dtype for a in task.args), tuple(axes),
                   tuple(tuple(g) for g in groups.values() if len(g) > 1), tuple(static), points, tuple(held),
                   {"atol": tol.atol, "rtol": tol.rtol}, len(suite.cases), suite.hash, task.static_as_kwargs)

    # --- checking ------------------------------------------------------------------------
    def check(self, shapes: Sequence[Sequence[int]], dtypes: Sequence[Any] | None = None,
              static: Mapping[str, Any] | Sequence[Any] | None = None) -> str | None:
        """Why these inputs (and statics, by name or in order) are outside the envelope; None when inside."""
        if len(shapes) != len(self.names):
            return f"{len(shapes)} inputs given, the kernel was verified with {len(self.names)} ({', '.join(self.names)})"
        for i, (name, shape) in enumerate(zip(self.names, shapes)):
            if dtypes is not None and np.dtype(dtypes[i]).name != self.dtypes[i]:
                return f"input {name!r} is {np.dtype(dtypes[i]).name}, verified as {self.dtypes[i]}"
            if len(shape) != len(self.axes[i]):
                return f"input {name!r} has rank {len(shape)}, verified with rank {len(self.axes[i])}"
            for j, (v, ax) in enumerate(zip(shape, self.axes[i])):
                if not ax.allows(int(v)):
                    return f"input {name!r} axis {j} is {int(v)}; verified: {ax.words()}"
        for group in self.equal:
            sizes = {int(shapes[i][j]) for i, j in group}
            if len(sizes) > 1:
                where = ", ".join(f"{self.names[i]}[{j}]" for i, j in group)
                return f"axes {where} were equal at every verified size and differ here ({sorted(sizes)})"
        if static is not None:
            given = dict(static) if isinstance(static, Mapping) else dict(zip((s.name for s in self.static), static))
            for s in self.static:
                if s.name in given and not s.allows(given[s.name]):
                    return f"static {s.name}={given[s.name]!r}; verified: {s.words()}"
        return None

    # --- words and records ---------------------------------------------------------------
    def lines(self) -> list[str]:
        """The envelope in plain words, one line each."""
        out = [f"verified on {len(self.points)} sizes ({', '.join(self.points)}; held out from the author: "
               f"{', '.join(self.heldout) or 'none'}), {self.cases} frozen cases, suite {self.suite_hash[:16]}"]
        for name, dtype, axes in zip(self.names, self.dtypes, self.axes):
            out.append(f"  {name}: {dtype}[{', '.join(a.words() for a in axes)}]")
        for group in self.equal:
            out.append("  equal: " + " = ".join(f"{self.names[i]}[{j}]" for i, j in group))
        for s in self.static:
            out.append(f"  static {s.name}: {s.words()}")
        out.append(f"  tolerance: atol {self.tolerance.get('atol')}, rtol {self.tolerance.get('rtol')}")
        return out

    def to_dict(self) -> dict[str, Any]:
        return {"names": list(self.names), "dtypes": list(self.dtypes),
                "axes": [[[a.kind, list(a.values), a.unit] for a in row] for row in self.axes],
                "equal": [[list(p) for p in g] for g in self.equal],
                "static": [[s.name, s.kind, [_plain(v) for v in s.values], s.type] for s in self.static],
                "points": dict(self.points), "heldout": list(self.heldout), "tolerance": {k: _plain(v) for k, v in self.tolerance.items()},
                "cases": self.cases, "suite_hash": self.suite_hash, "static_as_kwargs": self.static_as_kwargs}

    @classmethod
    def from_dict(cls, d: Mapping[str, Any]) -> "Envelope":
        return cls(tuple(d["names"]), tuple(d["dtypes"]),
                   tuple(tuple(Axis(k, tuple(v), int(u)) for k, v, u in row) for row in d["axes"]),
                   tuple(tuple((int(i), int(j)) for i, j in g) for g in d["equal"]),
                   tuple(Static(n, k, tuple(v), t) for n, k, v, t in d["static"]),
                   dict(d["points"]), tuple(d["heldout"]), dict(d["tolerance"]), int(d["cases"]), str(d["suite_hash"]),
                   bool(d.get("static_as_kwargs", False)))

    def guard_source(self, entry: str = "kernel") -> str:
        """Python for the end of a written kernel file: ``entry`` refuses, at trace time, inputs outside the envelope."""
        rule = {"names": list(self.names), "dtypes": list(self.dtypes),
                "axes": [[[a.kind, list(a.values), a.unit] for a in row] for row in self.axes],
                "equal": [[list(p) for p in g] for g in self.equal],
                "static": [[s.name, s.kind, [_plain(v) for v in s.values], s.type] for s in self.static],
                "static_as_kwargs": self.static_as_kwargs}
        return _GUARD.format(rule=repr(rule), entry=entry, outside=OUTSIDE)


def _same(a: Any, b: Any) -> bool:
    if isinstance(a, float) or isinstance(b, float):
        try:
            return float(a) == float(b) or (math.isnan(float(a)) and math.isnan(float(b)))
        except (TypeError, ValueError):
            return False
    return type(a) is type(b) and a == b or repr(a) == repr(b)


def _unique(values: Sequence[Any]) -> list[Any]:
    out: list[Any] = []
    for v in values:
        if not any(_same(v, w) for w in out):
            out.append(v)
    return out


def _plain(v: Any) -> Any:
    if isinstance(v, (str, int, float, bool)) or v is None:
        return v
    if isinstance(v, (list, tuple)):
        return [_plain(x) for x in v]
    return repr(v)


_GUARD = '''

# --- mk: the verified envelope. Outside it the kernel refuses to trace (shapes are static under jit). ---
MK_ENVELOPE = {rule}
_mk_unchecked_{entry} = {entry}


def _mk_outside(args, kwargs):
    env = MK_ENVELOPE
    n = len(env["names"])
    if len(args) < n:
        return "%d inputs given, the kernel was verified with %d" % (len(args), n)
    for i in range(n):
        name, shape, dtype = env["names"][i], tuple(getattr(args[i], "shape", ())), str(getattr(args[i], "dtype", ""))
        if dtype != env["dtypes"][i]:
            return "input %r is %s, verified as %s" % (name, dtype, env["dtypes"][i])
        if len(shape) != len(env["axes"][i]):
            return "input %r has rank %d, verified with rank %d" % (name, len(shape), len(env["axes"][i]))
        for j in range(len(shape)):
            kind, values, unit = env["axes"][i][j]
            v = int(shape[j])
            ok = (v >= min(values) and v % unit == 0) if kind == "multiple" else v in values
            if not ok:
                rule = "a multiple of %d >= %d" % (unit, min(values)) if kind == "multiple" else "one of %s" % (values,)
                return "input %r axis %d is %d; verified: %s" % (name, j, v, rule)
    for group in env["equal"]:
        sizes = [int(args[i].shape[j]) for i, j in group]
        if min(sizes) != max(sizes):
            return "axes %s must be equal, got %s" % (group, sizes)
    given = kwargs if env["static_as_kwargs"] else dict(zip([s[0] for s in env["static"]], args[n:]))
    for name, kind, values, typ in env["static"]:
        if name not in given:
            continue
        v = given[name]
        if kind == "any":
            ok = type(v).__name__ == typ or (typ == "float" and isinstance(v, (int, float)) and not isinstance(v, bool))
        else:
            ok = any(v == w or repr(v) == w for w in values)
        if not ok:
            rule = "any %s" % typ if kind == "any" else "one of %s" % (values,)
            return "static %s=%r; verified: %s" % (name, v, rule)
    return None


def {entry}(*args, **kwargs):
    why = _mk_outside(args, kwargs)
    if why is not None:
        raise ValueError("{outside}: " + why + " (see the header of this file)")
    return _mk_unchecked_{entry}(*args, **kwargs)
'''
