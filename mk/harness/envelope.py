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
import numbers
from dataclasses import dataclass, field
from typing import Any, Mapping, Sequence

import numpy as np

from mk.harness.arrays import decode_static, encode_static


#: the first words of the error a written kernel raises outside its envelope (the judge recognises them)
OUTSIDE = "outside the verified envelope"


@dataclass(frozen=True)
class Axis:
    kind: str  # fixed | multiple | one_of
    values: tuple[int, ...]
    unit: int = 0
    top: int = 0  # the largest size a ``multiple`` rule claims (the largest judged, or the top of the fresh draws)

    def allows(self, v: int) -> bool:
        if self.kind == "multiple":
            return min(self.values) <= v <= self.top and v % self.unit == 0
        return v in self.values

    def words(self) -> str:
        if self.kind == "fixed":
            return str(self.values[0])
        if self.kind == "multiple":
            return (f"any multiple of {self.unit} from {min(self.values)} to {self.top} (verified at "
                    f"{', '.join(map(str, self.values))} and at secret sizes drawn in that range by every evaluation)")
        return "one of " + ", ".join(map(str, self.values))


@dataclass(frozen=True)
class Static:
    name: str
    kind: str  # fixed | one_of | range | axis
    values: tuple[Any, ...]
    axis: tuple[int, int] = (0, 0)  # for ``axis``: the input axis the value always equals

    def allows(self, v: Any, shapes: Sequence[Sequence[int]] | None = None) -> bool:
        if self.kind == "range":
            return _real(v) and min(self.values) <= float(v) <= max(self.values)
        if self.kind == "axis":
            i, j = self.axis
            return _integral(v) and shapes is not None and int(v) == int(shapes[i][j])
        return any(_same(v, w) for w in self.values)

    def words(self, names: Sequence[str] = ()) -> str:
        if self.kind == "range":
            return f"any number from {min(self.values)!r} to {max(self.values)!r} (verified at {', '.join(map(repr, self.values))})"
        if self.kind == "axis":
            i, j = self.axis
            return f"equal to {names[i] if i < len(names) else i}.shape[{j}] (so at every verified size)"
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
    #: only the verified points themselves (tasks whose held-out sizes are declared, not drawn: no size between
    #: or beyond them was ever judged, and relations between dims, such as pages = sequences x pages per sequence,
    #: hold only there)
    exact: bool = False
    #: declared sizes the cases did not run, claimed because the chip's compiler compiled them and their program runs
    #: the code the judged sizes ran (:func:`mk.harness.program.paths_covered`): accepted at exactly these points
    compiled: Mapping[str, Any] = field(default_factory=dict)

    # --- building ------------------------------------------------------------------------
    @classmethod
    def of(cls, task: Any, suite: Any, compiled: Mapping[str, Any] | None = None) -> "Envelope":
        """The envelope of ``suite`` on ``task`` (the task without or with the suite's held-out scales); ``compiled``:
        the covered declared sizes of a verdict (``EvalResult.covered``: name -> point), accepted exactly."""
        from mk.harness.heldout import fresh_tops
        from mk.task import dtype_name, np_dtype

        authoring = task
        task = suite.judged(task)
        scales = list(suite.scales)
        held = [s for s in scales if s in suite.heldout_names]
        seen = [s for s in scales if s not in held]
        shapes = {s: task.shapes(s) for s in scales}
        statics = {s: task.static_values(s) for s in scales}
        tops = fresh_tops(suite.base(authoring)) if held else {}
        exact = bool(held) and (authoring.heldout is not None or authoring.native_inputs is not None)
        axes = []
        for i, arg in enumerate(task.args):
            row = []
            for j in range(len(shapes[scales[0]][i])):
                values = tuple(sorted({int(shapes[s][i][j]) for s in scales}))
                authored = {int(shapes[s][i][j]) for s in seen}
                if len(values) == 1:
                    row.append(Axis("fixed", values))
                elif not exact and any(int(shapes[s][i][j]) not in authored for s in held):
                    row.append(Axis("multiple", values, math.gcd(*values), max(max(values), tops.get((i, j), 0))))
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
            moved = any(not any(_same(statics[n][k], a) for a in authored) for n in held)
            tie = _axis_tie([statics[n][k] for n in scales], [shapes[n] for n in scales]) if len(values) > 1 else None
            if len(values) == 1:
                static.append(Static(s.name, "fixed", tuple(values)))
            elif tie is not None:  # an int static equal to one axis at every verified size: it stays tied to it
                static.append(Static(s.name, "axis", tuple(values), tie))
            elif moved and not exact and all(_real(v) and not isinstance(v, bool) for v in values):
                static.append(Static(s.name, "range", tuple(float(v) for v in values)))
            else:
                static.append(Static(s.name, "one_of", tuple(values)))
        points = {s: cls.point(task, s) for s in scales}
        tol = task.tolerance
        return cls(tuple(a.name for a in task.args), tuple(dtype_name(np_dtype(a.dtype)) for a in task.args), tuple(axes),
                   tuple(tuple(g) for g in groups.values() if len(g) > 1), tuple(static), points, tuple(held),
                   {"atol": tol.atol, "rtol": tol.rtol}, len(suite.cases), suite.hash, task.static_as_kwargs, exact,
                   dict(compiled or {}))

    @staticmethod
    def point(task: Any, scale: str, chips: Sequence[str] = ()) -> dict[str, Any]:
        """One size of ``task`` as an envelope point (shapes, dtypes, statics; ``chips``: where it compiled)."""
        statics = task.static_values(scale)
        point = {"inputs": [[list(shape), a.dtype] for shape, a in zip(task.shapes(scale), task.args)],
                 "static": {st.name: repr(v) for st, v in zip(task.static, statics)},
                 "values": [_encode(v) for v in statics]}
        return {**point, "chips": list(chips)} if chips else point

    # --- checking ------------------------------------------------------------------------
    def check(self, shapes: Sequence[Sequence[int]], dtypes: Sequence[Any] | None = None,
              static: Mapping[str, Any] | Sequence[Any] | None = None) -> str | None:
        """Why these inputs (and statics, by name or in order) are outside the envelope; None when inside."""
        why = self._check(shapes, dtypes, static)
        if why is None or why.startswith("input ") or not self.compiled:  # a count, a dtype or a rank: never a point
            return why
        given = {}
        if static is not None:
            given = dict(static) if isinstance(static, Mapping) else dict(zip((s.name for s in self.static), static))
        return None if self._at_a_point(shapes, given, self.compiled) else why

    def _check(self, shapes: Sequence[Sequence[int]], dtypes: Sequence[Any] | None,
               static: Mapping[str, Any] | Sequence[Any] | None) -> str | None:
        if len(shapes) != len(self.names):
            return f"{len(shapes)} inputs given, the kernel was verified with {len(self.names)} ({', '.join(self.names)})"
        for i, (name, shape) in enumerate(zip(self.names, shapes)):
            if dtypes is not None and np.dtype(dtypes[i]).name != self.dtypes[i]:
                return f"input {name!r} is {np.dtype(dtypes[i]).name}, verified as {self.dtypes[i]}"
            if len(shape) != len(self.axes[i]):
                return f"input {name!r} has rank {len(shape)}, verified with rank {len(self.axes[i])}"
            for j, (v, ax) in enumerate(zip(shape, self.axes[i])):
                if not ax.allows(int(v)):
                    return f"{name}[{j}] is {int(v)}; verified: {ax.words()}"
        for group in self.equal:
            sizes = {int(shapes[i][j]) for i, j in group}
            if len(sizes) > 1:
                where = " = ".join(f"{self.names[i]}[{j}]" for i, j in group)
                return f"axes {where} were equal at every verified size, not here ({' and '.join(map(str, sorted(sizes)))})"
        given = {}
        if static is not None:
            given = dict(static) if isinstance(static, Mapping) else dict(zip((s.name for s in self.static), static))
            for s in self.static:
                if s.name in given and not s.allows(given[s.name], shapes):
                    return f"static {s.name}={given[s.name]!r}; verified: {s.words(self.names)}"
        if self.exact and not self._at_a_point(shapes, given):
            return ("these sizes and static values are not one of the verified points (this task's held-out sizes are "
                    "declared, so only those points were judged): " + "; ".join(self.points))
        return None

    def extends_to(self, shapes: Sequence[Sequence[int]], static: Mapping[str, Any]) -> str | None:
        """Why a size outside the rule is not a continuation of what was verified (None when it is): it may lie past
        the judged range only along axes the judged sizes varied; a fixed axis, a tie between axes, a dtype, a rank
        and every static must be as verified (a number baked in for a value no judged size changed would be wrong
        there, and no case would show it)."""
        if len(shapes) != len(self.names):
            return f"{len(shapes)} inputs, verified with {len(self.names)}"
        for name, shape, axes in zip(self.names, shapes, self.axes):
            if len(shape) != len(axes):
                return f"input {name!r} has rank {len(shape)}, verified with rank {len(axes)}"
            for j, (v, ax) in enumerate(zip(shape, axes)):
                if ax.kind == "fixed" and int(v) != ax.values[0]:
                    return f"{name}[{j}] is {int(v)} and no judged size varied it from {ax.values[0]}"
        for group in self.equal:
            if len({int(shapes[i][j]) for i, j in group}) > 1:
                return "axes " + " = ".join(f"{self.names[i]}[{j}]" for i, j in group) + " were equal at every judged size"
        for s in self.static:
            if s.name in static and not s.allows(static[s.name], shapes):
                return f"static {s.name}={static[s.name]!r} and the judged sizes had {s.words(self.names)}"
        return None

    def _at_a_point(self, shapes: Sequence[Sequence[int]], given: Mapping[str, Any],
                    points: Mapping[str, Any] | None = None) -> bool:
        want = [[int(d) for d in s] for s in shapes]
        for point in (self.points if points is None else points).values():
            if [list(map(int, shape)) for shape, _ in point["inputs"]] != want:
                continue
            values = [decode_static(v) for v in point.get("values", [])]
            if all(s.name not in given or _same(given[s.name], v) for s, v in zip(self.static, values)):
                return True
        return False

    # --- words and records ---------------------------------------------------------------
    def lines(self) -> list[str]:
        """The envelope in plain words, one line each."""
        out = [f"verified on {len(self.points)} sizes ({', '.join(self.points)}; held out from the author: "
               f"{', '.join(self.heldout) or 'none'}), {self.cases} frozen cases, suite {self.suite_hash[:16]}"]
        if self.exact:
            out.append("  only at those sizes: the held-out sizes are declared by the task, none was drawn")
        for name, dtype, axes in zip(self.names, self.dtypes, self.axes):
            out.append(f"  {name}: {dtype}[{', '.join(a.words() for a in axes)}]")
        for group in self.equal:
            out.append("  equal: " + " = ".join(f"{self.names[i]}[{j}]" for i, j in group))
        for s in self.static:
            out.append(f"  static {s.name}: {s.words(self.names)}")
        for name, point in self.compiled.items():
            shapes = ", ".join(f"{n}{list(shape)}" for n, (shape, _) in zip(self.names, point["inputs"]))
            out.append(f"  also exactly at {name} ({shapes}): one case from a secret seed ran there, it compiled for "
                       f"{', '.join(point.get('chips') or ['the chip'])}, and its program runs the code the verified sizes ran")
        out.append(f"  tolerance: atol {self.tolerance.get('atol')}, rtol {self.tolerance.get('rtol')}")
        return out

    def rule(self) -> dict[str, Any]:
        """The checkable part, as JSON-able data (statics tagged as :func:`mk.harness.arrays.encode_static` does)."""
        return {"names": list(self.names), "dtypes": list(self.dtypes),
                "axes": [[[a.kind, list(a.values), a.unit, a.top] for a in row] for row in self.axes],
                "equal": [[list(p) for p in g] for g in self.equal],
                "static": [[s.name, s.kind, [_encode(v) for v in s.values], list(s.axis)] for s in self.static],
                "static_as_kwargs": self.static_as_kwargs, "exact": self.exact,
                "points": _point_rules(self.points), "compiled": _point_rules(self.compiled)}


    def to_dict(self) -> dict[str, Any]:
        return {**self.rule(), "points": dict(self.points), "compiled": dict(self.compiled), "heldout": list(self.heldout),
                "tolerance": {k: _plain(v) for k, v in self.tolerance.items()}, "cases": self.cases,
                "suite_hash": self.suite_hash}

    @classmethod
    def from_dict(cls, d: Mapping[str, Any]) -> "Envelope":
        return cls(tuple(d["names"]), tuple(d["dtypes"]),
                   tuple(tuple(Axis(a[0], tuple(a[1]), int(a[2]), int(a[3]) if len(a) > 3 else 0) for a in row) for row in d["axes"]),
                   tuple(tuple((int(i), int(j)) for i, j in g) for g in d["equal"]),
                   tuple(Static(n, k, tuple(decode_static(x) for x in v), tuple(ax) if isinstance(ax, list) else (0, 0))
                         for n, k, v, ax in d["static"]),
                   dict(d["points"]), tuple(d["heldout"]), dict(d["tolerance"]), int(d["cases"]), str(d["suite_hash"]),
                   bool(d.get("static_as_kwargs", False)), bool(d.get("exact", False)), dict(d.get("compiled") or {}))

    def guard_source(self, entry: str = "kernel", tuned: Mapping[str, Any] | None = None) -> str:
        """Python for the end of a written kernel file: ``entry`` refuses, at trace time, inputs outside the envelope,
        and keyword tunables other than ``tuned`` (the config the verdict verified; none: the kernel's defaults)."""
        rule = _guard_literal(self.rule())
        return (_GUARD_HEAD.format(rule=repr(rule), tuned=repr(dict(tuned or {})), entry=entry) + _GUARD_CHECK
                + _GUARD_ENTRY.format(entry=entry, outside=OUTSIDE))


def _point_rules(points: Mapping[str, Any]) -> list[list[Any]]:
    return [[[list(map(int, shape)) for shape, _ in p["inputs"]], p.get("values", [])] for p in points.values()]


def _axis_tie(values: Sequence[Any], shapes: Sequence[Sequence[Sequence[int]]]) -> tuple[int, int] | None:
    """The first input axis an int static equals at every verified size, if any."""
    if not all(_integral(v) and not isinstance(v, bool) for v in values):
        return None
    for i, shape in enumerate(shapes[0]):
        for j in range(len(shape)):
            if all(int(v) == int(sh[i][j]) for v, sh in zip(values, shapes)):
                return (i, j)
    return None


def _encode(value: Any) -> Any:
    """A static as JSON (:func:`encode_static`), or its repr for values that have no JSON form."""
    try:
        return encode_static(value)
    except TypeError:
        return {"__repr__": repr(value)}


def _guard_literal(value: Any) -> Any:
    """Tagged statics as plain literals the written file compares against: tuples stay tuples, dtypes by name."""
    if isinstance(value, dict):
        if "__tuple__" in value:
            return tuple(_guard_literal(v) for v in value["__tuple__"])
        if "__dtype__" in value:
            return "dtype:" + value["__dtype__"]
        if "__dict__" in value:
            return {k: _guard_literal(v) for k, v in value["__dict__"].items()}
        if "__repr__" in value:
            return value
        return {k: _guard_literal(v) for k, v in value.items()}
    if isinstance(value, list):
        return [_guard_literal(v) for v in value]
    return value


def _real(v: Any) -> bool:
    return isinstance(v, numbers.Real) and not isinstance(v, bool) and not isinstance(v, np.bool_)


def _integral(v: Any) -> bool:
    return isinstance(v, numbers.Integral) and not isinstance(v, (bool, np.bool_))


def _same(a: Any, b: Any) -> bool:
    if isinstance(b, dict) and "__repr__" in b:
        return repr(a) == b["__repr__"]
    if _real(a) and _real(b):
        return float(a) == float(b) or (math.isnan(float(a)) and math.isnan(float(b)))
    if isinstance(a, (tuple, list)) and isinstance(b, (tuple, list)):
        return len(a) == len(b) and all(_same(x, y) for x, y in zip(a, b))
    if _is_dtype(a) or _is_dtype(b):
        try:
            return np.dtype(a) == np.dtype(b)
        except TypeError:
            return False
    return type(a) is type(b) and a == b or repr(a) == repr(b)


def _is_dtype(v: Any) -> bool:
    return isinstance(v, np.dtype) or (isinstance(v, type) and issubclass(v, np.generic))


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


_GUARD_HEAD = '''

# --- mk: the verified envelope. Outside it the kernel refuses to trace ---
# (shapes are static under jit, so the check runs once per shape)
MK_ENVELOPE = {rule}
MK_TUNED = {tuned}
_mk_unchecked_{entry} = {entry}
'''

#: the check itself: the same code runs in the written file and, on the literal it declares, in the judge
_GUARD_CHECK = '''

def _mk_same(v, w):
    if isinstance(w, str) and w.startswith("dtype:"):
        return w[6:] in (getattr(v, "name", None), getattr(v, "__name__", None), str(v))
    if isinstance(w, (tuple, list)):
        return isinstance(v, (tuple, list)) and len(v) == len(w) and all(_mk_same(a, b) for a, b in zip(v, w))
    if isinstance(w, dict) and "__repr__" in w:
        return repr(v) == w["__repr__"]
    if isinstance(w, bool) or isinstance(v, bool):
        return type(v) is type(w) and v == w
    if isinstance(w, (int, float)):
        return _mk_number(v) and float(v) == float(w)
    return v == w


def _mk_number(v):
    if isinstance(v, (bool, str, bytes)) or type(v).__name__ in ("bool_", "str_", "bytes_"):
        return False
    return isinstance(v, (int, float)) or type(v).__module__ == "numpy"


def _mk_outside(args, kwargs):
    env = MK_ENVELOPE
    n = len(env["names"])
    if len(args) < n:
        return "%d inputs given, the kernel was verified with %d" % (len(args), n)
    shapes = [tuple(int(d) for d in getattr(a, "shape", ())) for a in args[:n]]
    names = [s[0] for s in env["static"]]
    given = dict(zip(names, args[n:]))
    given.update(dict((k, kwargs[k]) for k in names if k in kwargs))
    why = _mk_kinds(env, args, shapes)
    if why is not None:
        return why
    why = _mk_sizes(env, shapes, given)
    if why is not None and not _mk_at(env.get("compiled", []), shapes, names, given):
        return why
    tuned = MK_TUNED
    for k in kwargs:  # a tunable (block size) other than the verified one was never judged
        if k not in names and not (k in tuned and _mk_same(kwargs[k], tuned[k])):
            return "keyword %s=%r was not verified (the verified config: %r)" % (k, kwargs[k], tuned)
    return None


def _mk_at(points, shapes, names, given):
    for point_shapes, point_values in points:
        if [list(s) for s in shapes] == point_shapes and all(
                name not in given or _mk_same(given[name], w) for name, w in zip(names, point_values)):
            return True
    return False


def _mk_axis(i, j):
    return "%s[%d]" % (MK_ENVELOPE["names"][i], j)


def _mk_kinds(env, args, shapes):
    for i in range(len(env["names"])):
        name, shape, dtype = env["names"][i], shapes[i], str(getattr(args[i], "dtype", ""))
        if dtype != env["dtypes"][i]:
            return "input %r is %s, verified as %s" % (name, dtype, env["dtypes"][i])
        if len(shape) != len(env["axes"][i]):
            return "input %r has rank %d, verified with rank %d" % (name, len(shape), len(env["axes"][i]))
    return None


def _mk_sizes(env, shapes, given):
    for i in range(len(env["names"])):
        shape = shapes[i]
        for j in range(len(shape)):
            kind, values, unit, top = env["axes"][i][j]
            v = shape[j]
            ok = (min(values) <= v <= top and v % unit == 0) if kind == "multiple" else v in values
            if not ok:
                rule = "a multiple of %d from %d to %d" % (unit, min(values), top) if kind == "multiple" else "one of %s" % (values,)
                return "%s is %d; verified: %s" % (_mk_axis(i, j), v, rule)
    for group in env["equal"]:
        sizes = [shapes[i][j] for i, j in group]
        if min(sizes) != max(sizes):
            return "%s must be equal, got %s" % (" = ".join(_mk_axis(i, j) for i, j in group), " and ".join(map(str, sizes)))
    names = [s[0] for s in env["static"]]
    for name, kind, values, axis in env["static"]:
        if name not in given:
            continue
        v = given[name]
        if kind == "range":
            ok = _mk_number(v) and min(values) <= float(v) <= max(values)
            rule = "a number from %r to %r" % (min(values), max(values))
        elif kind == "axis":
            ok = _mk_number(v) and float(v) == int(v) and int(v) == shapes[axis[0]][axis[1]]
            rule = "equal to %s" % _mk_axis(axis[0], axis[1])
        else:
            ok = any(_mk_same(v, w) for w in values)
            rule = "one of %r" % (values,)
        if not ok:
            return "static %s=%r; verified: %s" % (name, v, rule)
    if env["exact"] and not _mk_at(env["points"], shapes, names, given):
        return "these sizes and static values are not one of the verified points"
    return None
'''

_GUARD_ENTRY = '''

def {entry}(*args, **kwargs):
    why = _mk_outside(args, kwargs)
    if why is not None:
        raise ValueError("{outside}: " + why + " (see the header of this file)")
    return _mk_unchecked_{entry}(*args, **kwargs)
'''


# --- the judge's side: the envelope a candidate declares, checked by the judge itself -------------------------------
def declared_rule(source: str) -> dict[str, Any] | None:
    """The ``MK_ENVELOPE`` literal a candidate declares at the top level of its file (a kernel mk wrote), or None.

    Read with ``ast.literal_eval``, never by running the candidate: only a plain literal assigned once counts. The
    judge decides ``outside_envelope`` from this declaration (:func:`declared_outside`), never from the words of an
    error the candidate raises (those are the candidate's to fake)."""
    import ast

    try:
        tree = ast.parse(source)
    except (SyntaxError, ValueError, RecursionError, MemoryError):
        return None
    rule = _literal(tree, "MK_ENVELOPE")
    keys = ("names", "dtypes", "axes", "equal", "static", "exact", "points")
    if not isinstance(rule, dict) or any(k not in rule for k in keys):
        return None
    tuned = _literal(tree, "MK_TUNED")
    return {**rule, "_tuned": tuned if isinstance(tuned, dict) else {}}


def _literal(tree: Any, name: str) -> Any:
    """The literal assigned once, at the top level, to ``name``; None otherwise (a second assignment, a non-literal)."""
    import ast

    found = [node for node in tree.body if isinstance(node, (ast.Assign, ast.AnnAssign, ast.AugAssign))
             and any(isinstance(t, ast.Name) and t.id == name for t in (node.targets if isinstance(node, ast.Assign) else [node.target]))]
    if len(found) != 1 or not isinstance(found[0], ast.Assign) or len(found[0].targets) != 1:
        return None
    try:
        return ast.literal_eval(found[0].value)
    except (ValueError, TypeError, SyntaxError, RecursionError, MemoryError):
        return None


def declared_outside(rule: Mapping[str, Any], structs: Sequence[Any], static: Mapping[str, Any],
                     config: Mapping[str, Any] | None = None) -> str | None:
    """Why inputs with these shapes/dtypes (``structs``: objects with ``shape`` and ``dtype``), statics (by name)
    and tunables (``config``, passed as keywords) lie outside the declared ``rule``: the written guard's own check,
    run by the judge on the literals it parsed. None inside. A rule the check cannot read raises ValueError."""
    rule = dict(rule)
    namespace: dict[str, Any] = {"MK_TUNED": rule.pop("_tuned", {}), "MK_ENVELOPE": rule}
    static = {**dict(config or {}), **dict(static)}
    exec(compile(_GUARD_CHECK, "<mk envelope check>", "exec"), namespace)  # noqa: S102 - mk's own template
    try:
        why = namespace["_mk_outside"](tuple(structs), dict(static))
    except Exception as exc:  # noqa: BLE001 - a malformed declaration: not one the judge can apply
        raise ValueError(f"the declared MK_ENVELOPE cannot be checked ({type(exc).__name__}: {exc})") from None
    return None if why is None else str(why)
