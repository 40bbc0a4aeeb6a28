"""Probe the reference at sizes and static values of the author's choosing, so a kernel is written for any of them.

The offline author sees one scale. A kernel written from that trace alone bakes
in its numbers: ``sum / 512.0`` where the reference means ``mean`` over the
hidden axis, ``+ 1e-05`` where it adds the static ``epsilon``, a reshape to
``(4, 64)`` where it splits ``out_features`` into ``num_groups`` groups.

:func:`probe` traces the reference again with one *variable* changed at a
time: a dim (a named dim, or one input axis, moved together with the axes and
int statics that must stay equal to it) is doubled and tripled, a float static
is moved. Where the jaxpr keeps its structure, every literal and every shape in
it is then known as a function of the variables; :meth:`Probes.fit` finds the
expression (``E``, ``1.0 / E``, ``epsilon``, ``out_features // num_groups``,
``0.5 * scaling_factor`` ...) that reproduces it at every probe, and the
templates write that expression, evaluated at trace time from the kernel's own
arguments, instead of the number.

Nothing here runs the reference: it is only traced (``jax.make_jaxpr``), at
sizes the author picks.
"""

from __future__ import annotations

import builtins
import itertools
import keyword
import logging
import math
from dataclasses import dataclass, field, replace
from fractions import Fraction
from typing import Any, Iterable, Sequence

from mk.author.trace import Traced
from mk.task import Scale, Task

log = logging.getLogger(__name__)

#: factors a dim is probed at (the first two that the reference accepts are kept)
_DIM_FACTORS = (2, 3, 4, 5)
#: names a kernel module defines or imports: a variable or input is never called that
RESERVED = frozenset({
    "jax", "jnp", "lax", "pl", "pltpu", "pltriton", "functools", "math", "np", "kernel", "CONFIG_SPACE",
    "ins", "outs", "refs", "body", "epilogue",
}) | frozenset(dir(builtins))


def identifier(name: str, taken: Iterable[str] = ()) -> str:
    """``name`` as a Python identifier that is not a keyword, a builtin, a module name of the kernel, or taken."""
    taken = set(taken)
    out = "".join(c if c.isalnum() or c == "_" else "_" for c in str(name)) or "arg"
    if out[0].isdigit():
        out = "_" + out
    while keyword.iskeyword(out) or out in RESERVED or out in taken:
        out += "_"
    return out


def arg_names(task: Task) -> list[str]:
    """The kernel's parameter names for the task's inputs: the reference's own names, made safe."""
    names: list[str] = []
    statics = {s.name for s in task.static}
    for a in task.args:
        names.append(identifier(a.name, names + sorted(statics)))
    return names


def static_names(task: Task) -> list[str]:
    """The kernel's parameter names for the statics: the task's names (keywords must keep them exactly)."""
    if task.static_as_kwargs:
        return [s.name for s in task.static]
    names: list[str] = []
    inputs = arg_names(task)
    for s in task.static:
        names.append(identifier(s.name, names + inputs))
    return names


def signature(task: Task, config: str) -> str:
    """``x, w, eps, *, block_m=128`` (positional statics) or ``x, w, *, eps, block_m=128`` (statics by keyword)."""
    ins = arg_names(task)
    sts = static_names(task)
    if task.static_as_kwargs:
        parts = ins + (["*"] + sts + ([config] if config else []) if sts or config else [])
    else:
        parts = ins + sts + (["*", config] if config else [])
    return ", ".join(parts)


@dataclass(frozen=True)
class Var:
    """One number a kernel reads from its arguments at trace time."""

    name: str  # the identifier the kernel's code uses
    source: str  # how ``kernel`` computes it from its parameters: ``x.shape[2]``, ``epsilon``
    kind: str  # dim | static
    value: Any  # at the authoring scale

    @property
    def integer(self) -> bool:
        return isinstance(self.value, int) and not isinstance(self.value, bool)


@dataclass
class Probe:
    var: Var
    value: Any
    traced: Traced


@dataclass(frozen=True)
class _Item:
    """Something a probe can move: a named dim (all its axes), one input axis, or an int static."""

    label: str
    axes: tuple[tuple[int, int], ...]
    static: str | None
    value: int


@dataclass
class Probes:
    """The base trace, the variables, and the probes that kept the jaxpr's structure (one variable moved each)."""

    task: Task
    base: Traced
    vars: list[Var]
    probes: list[Probe]
    opaque: list[str] = field(default_factory=list)  # variables whose probes the reference refused or restructured
    #: statics probed with the dims that follow them (:func:`_tied_moves`): a value that depends on them through
    #: no form :meth:`fit` knows is written as its number, as before they were probed
    tied: list[str] = field(default_factory=list)
    _peers: dict[int, list[Any]] | None = None
    _lits: dict[int, list[Any]] | None = None

    # --- traces ------------------------------------------------------------------------------
    @property
    def traces(self) -> list[Traced]:
        return [self.base] + [p.traced for p in self.probes]

    def env(self, k: int) -> dict[str, Any]:
        """The variables' values at trace ``k`` (0: the base)."""
        env = {v.name: v.value for v in self.vars}
        if k:
            p = self.probes[k - 1]
            env[p.var.name] = p.value
        return env

    def peers(self, eqn: Any) -> list[Any]:
        """``eqn`` (of the base jaxpr) at every trace, base first."""
        if self._peers is None:
            self._align()
        return self._peers.get(id(eqn), [eqn])  # type: ignore[union-attr]

    def literal(self, lit: Any) -> list[Any]:
        """The literal's value at every trace, base first."""
        if self._lits is None:
            self._align()
        return self._lits.get(id(lit), [lit.val])  # type: ignore[union-attr]

    def _align(self) -> None:
        peers: dict[int, list[Any]] = {}
        lits: dict[int, list[Any]] = {}
        flats = [list(_flat_eqns(t.jaxpr.jaxpr)) for t in self.traces]
        for k, eqns in enumerate(zip(*flats)):
            peers[id(eqns[0])] = list(eqns)
            for pos, a in enumerate(eqns[0].invars):
                if _is_literal(a):
                    lits[id(a)] = [_scalar(e.invars[pos]) for e in eqns]
        self._peers, self._lits = peers, lits

    # --- expressions ---------------------------------------------------------------------------
    def fit(self, values: Sequence[Any], integer: bool = False, dtype: Any = None) -> str | None:
        """A Python expression over the variables equal to ``values[k]`` at every trace ``k``; None when the
        values do not change (write the number) or no expression fits (the caller decides). ``dtype``: the
        values were rounded to it (a bfloat16 literal matches its expression to bfloat16 precision)."""
        vals = [_num(v) for v in values]
        if any(v is None for v in vals) or len(vals) != 1 + len(self.probes):
            return None
        tol = _rtol(dtype)
        y0 = vals[0]
        if all(_close(v, y0) for v in vals):
            return None
        deps = []
        for var in self.vars:
            ks = [k for k, p in enumerate(self.probes, 1) if p.var.name == var.name]
            if any(not _close(vals[k], y0) for k in ks):
                deps.append((var, ks))
        if not deps:
            return None
        if len(deps) == 1:
            var, ks = deps[0]
            points = [(float(var.value), y0)] + [(float(self.probes[k - 1].value), vals[k]) for k in ks]
            got = _fit_one(var, points, integer, tol)
            if got is not None:
                return got
        got = _fit_monomial(self, deps, vals, integer, tol) or _fit_sum(self, deps, vals, integer, tol)
        if got is not None or not any(var.name in self.tied for var, _ in deps) or not math.isfinite(y0):
            return got
        log.info("task %s: %r depends on %s through no known form: the tied statics written as their numbers",
                 self.task.name, values[0], ", ".join(var.name for var, _ in deps))
        free = [var for var, _ in deps if var.name not in self.tied]
        if not free:
            return str(int(y0)) if integer and float(y0).is_integer() else repr(float(y0))
        # as before the tied statics were probed: a form in the other variables, the statics at their values
        ks = [k for k, probe in enumerate(self.probes, 1) if probe.var.name in {v.name for v in free}]
        held = replace(self, vars=free, probes=[self.probes[k - 1] for k in ks], tied=[], _peers=None, _lits=None)
        return held.fit([values[0]] + [values[k] for k in ks], integer, dtype)

    def literal_expr(self, lit: Any) -> str | None:
        """The expression a literal of the base jaxpr stands for, or None when it is a plain number."""
        return self.fit(self.literal(lit), dtype=getattr(lit.aval, "dtype", None))

    def dim(self, values: Sequence[int]) -> str:
        """An integer size at every trace as source: a number when it never changes, else an expression."""
        got = self.fit(values, integer=True)
        if got is not None:
            return got
        if all(int(v) == int(values[0]) for v in values):
            return str(int(values[0]))
        raise ValueError(f"size {list(values)} is not a function of the inputs' sizes and static values")

    def shape(self, shapes: Sequence[Sequence[int]]) -> str:
        """A shape at every trace as a source tuple."""
        parts = [self.dim([s[k] for s in shapes]) for k in range(len(shapes[0]))]
        return f"({parts[0]},)" if len(parts) == 1 else "(" + ", ".join(parts) + ")"

    def used(self, *texts: str) -> list[Var]:
        """The variables named in generated source ``texts`` (whole words), in declaration order."""
        import re

        words = set()
        for t in texts:
            words.update(re.findall(r"[A-Za-z_][A-Za-z0-9_]*", t))
        return [v for v in self.vars if v.name in words]


# --- building ---------------------------------------------------------------------------------------


def probes_for(task: Task, traced: Sequence[Traced]) -> Probes:
    """The probes of the task's first traced scale (made once, kept on the trace)."""
    base = traced[0]
    if base.probes is None or base.probes.task is not task:
        base.probes = probe(task, base)
    return base.probes


def probe(task: Task, base: Traced) -> Probes:
    """Trace the reference with each variable of ``task`` moved in turn (see the module doc)."""
    names = arg_names(task)
    snames = static_names(task)
    scale = task.scale(base.scale)
    statics = dict(zip((s.name for s in task.static), task.static_values(base.scale)))
    shapes = [tuple(s) for s in base.shapes]
    items = _items(task, scale, shapes, statics)
    vars_: list[Var] = []
    probes: list[Probe] = []
    opaque: list[str] = []
    base_prims = _prims(base)
    taken = set(names) | set(snames)

    def attempt(changes: dict[_Item, Any], fl: dict[str, float] | None = None) -> Traced | None:
        return _trace(task, shapes, statics, changes, fl or {})

    def aligned(t: Traced | None) -> bool:
        return t is not None and _prims(t) == base_prims

    # dims and int statics: items equal at the base are split into the classes the reference lets move alone
    by_value: dict[int, list[_Item]] = {}
    for it in items:
        by_value.setdefault(it.value, []).append(it)
    moved: set[_Item] = set()
    for value, group in by_value.items():
        for cls in _classes(group, lambda c: attempt({i: i.value * 2 for i in c}) is not None):
            moved.update(cls)
            var = _class_var(cls, names, snames, task, taken)
            taken.add(var.name)
            kept = []
            for f in _DIM_FACTORS:
                t = attempt({i: i.value * f for i in cls})
                if aligned(t):
                    kept.append(Probe(var, value * f, t))  # type: ignore[arg-type]
                if len(kept) == 2:
                    break
            vars_.append(var)
            if not kept:
                opaque.append(var.name)
            probes.extend(kept)
    # int statics the reference refuses to move alone (a head count a named dim multiplies): moved with the dims
    # that follow them, by the relations the task's other declared scales show
    fixed = [it for it in items if it not in moved]
    tied: list[str] = []
    for it, changes_at in _tied_moves(task, base.scale, items, fixed):
        sname = snames[[s.name for s in task.static].index(it.static)]
        var = Var(sname, sname, "dim", it.value)
        kept = []
        for f in _DIM_FACTORS:
            for changes in changes_at(it.value * f):
                t = attempt(changes)
                if aligned(t):
                    kept.append(Probe(var, it.value * f, t))  # type: ignore[arg-type]
                    break
            if len(kept) == 2:
                break
        if kept:
            taken.add(sname)
            vars_.append(var)
            tied.append(sname)
            probes.extend(kept)
    # float statics: each its own variable
    for s, sname in zip(task.static, snames):
        v = statics[s.name]
        if not isinstance(v, float) or not math.isfinite(v):
            continue
        var = Var(sname, sname, "static", v)
        kept = []
        for w in (2.0 * v + 0.5, 3.0 * v + 1.25, -v - 0.75):
            t = attempt({}, {s.name: w})
            if aligned(t):
                kept.append(Probe(var, w, t))  # type: ignore[arg-type]
            if len(kept) == 2:
                break
        vars_.append(var)
        if not kept:
            opaque.append(var.name)
        probes.extend(kept)
    if opaque:
        log.info("task %s: probes of %s were refused or changed the computation's structure", task.name, ", ".join(opaque))
    return Probes(task, base, vars_, probes, opaque, tied=tied)


def _items(task: Task, scale: Scale, shapes: list[tuple[int, ...]], statics: dict[str, Any]) -> list[_Item]:
    items: list[_Item] = []
    named = scale.shapes is None and any(isinstance(d, str) for a in task.args for d in a.shape)
    if named:
        dims: dict[str, list[tuple[int, int]]] = {}
        for i, a in enumerate(task.args):
            for j, d in enumerate(a.shape):
                if isinstance(d, str):
                    dims.setdefault(d, []).append((i, j))
        for d, axes in dims.items():
            i, j = axes[0]
            items.append(_Item(d, tuple(axes), None, int(shapes[i][j])))
    else:
        for i, s in enumerate(shapes):
            for j, n in enumerate(s):
                items.append(_Item(f"{task.args[i].name}.{j}", ((i, j),), None, int(n)))
    for s in task.static:
        v = statics[s.name]
        if isinstance(v, int) and not isinstance(v, bool) and v > 0:
            items.append(_Item(s.name, (), s.name, v))
    return [it for it in items if it.value > 0]


def _classes(group: list[_Item], moves: Any) -> list[list[_Item]]:
    """Split items equal at the base into the smallest sets the reference accepts moved together."""
    if len(group) == 1:
        return [group] if moves(group) else []
    out: list[list[_Item]] = []
    rest = list(group)
    while rest:
        a, others = rest[0], rest[1:]
        found = None
        sizes = list(range(1, min(len(rest), 3) + 1)) + ([len(rest)] if len(rest) > 3 else [])
        for size in sizes:
            for combo in itertools.combinations(others, size - 1):
                cls = [a, *combo]
                if moves(cls):
                    found = cls
                    break
            if found:
                break
        if found is None:
            rest = others  # the reference refuses every move of it: it stays fixed
            continue
        out.append(found)
        rest = [r for r in rest if r not in found]
    return out


#: at most this many combinations of the tied dims' candidate values are traced for one probe of a static
_TIED_COMBOS = 16


def _declared_values(task: Task, base_scale: str, items: list[_Item]) -> list[dict[_Item, int]]:
    """The items' values at each of the task's other declared scales (judged or compile-only); only shapes and
    statics are read, nothing is traced."""
    from mk.errors import MkError

    points = []
    for name, sc in {**task.compile_only, **task.scales}.items():
        if name == base_scale:
            continue
        try:
            t = task.with_scales({name: sc})
            shapes = t.shapes(name)
            st = dict(zip((s.name for s in task.static), t.static_values(name)))
            vals = {it: (st.get(it.static) if it.static is not None else shapes[it.axes[0][0]][it.axes[0][1]])
                    for it in items}
        except (MkError, IndexError, TypeError, ValueError):  # a malformed declared scale shows no relation
            continue
        points.append({it: v for it, v in vals.items()
                       if isinstance(v, int) and not isinstance(v, bool) and v > 0})
    return points


def _relations(dim: _Item, statics: list[_Item], base: dict[str, int], points: list[dict[_Item, int]]
               ) -> list[Any]:
    """Formulas over the statics (``s``, ``c * s``, ``s * t``, ``s + t``, ``s * (t + u)``) that give ``dim`` its
    value at the base and at every declared scale; none without a declared scale to check them on."""
    usable = [p for p in points if dim in p and all(s in p for s in statics)]
    if not usable:
        return []
    names = [s.static for s in statics]
    forms: list[Any] = []
    for a in names:
        forms.append(lambda e, a=a: e[a])
        forms.extend(lambda e, a=a, c=c: c * e[a] for c in (2, 3, 4))
    for a, b in itertools.combinations(names, 2):
        forms.append(lambda e, a=a, b=b: e[a] * e[b])
        forms.append(lambda e, a=a, b=b: e[a] + e[b])
    for a in names:
        for b, c in itertools.combinations([n for n in names if n != a], 2):
            forms.append(lambda e, a=a, b=b, c=c: e[a] * (e[b] + e[c]))
    envs = [(base, dim.value)] + [({s.static: p[s] for s in statics}, p[dim]) for p in usable]
    return [f for f in forms if all(f(e) == want for e, want in envs)]


def _tied_moves(task: Task, base_scale: str, items: list[_Item], fixed: list[_Item]) -> list[tuple[_Item, Any]]:
    """For each int static among ``fixed`` (items no probe could move), ``(static, changes_at)``:
    ``changes_at(value)`` yields the moves setting the static to ``value`` and every fixed dim to a value its
    relations to the statics give there (the relations read from the task's other declared scales: at ``ci``
    ``q_up_proj`` has ``num_heads * (qk_nope_head_dim + qk_rope_head_dim)`` columns because it has at ``full``)."""
    tied_statics = [it for it in fixed if it.static is not None]
    dims = [it for it in fixed if it.static is None]
    if not tied_statics or not dims:
        return []
    points = _declared_values(task, base_scale, items)
    base = {it.static: it.value for it in tied_statics}
    rels = {d: _relations(d, tied_statics, base, points) for d in dims}
    if not any(rels.values()):
        return []

    def changes_for(it: _Item) -> Any:
        def changes_at(value: int) -> Iterable[dict[_Item, Any]]:
            env = {**base, it.static: value}
            options = []
            for d in dims:
                got = sorted({f(env) for f in rels[d]} - {d.value}) if rels[d] else []
                options.append([v for v in got if v > 0] + [d.value])
            for combo in itertools.islice(itertools.product(*options), _TIED_COMBOS):
                yield {it: value, **{d: v for d, v in zip(dims, combo) if v != d.value}}
        return changes_at

    return [(it, changes_for(it)) for it in tied_statics]


def _class_var(cls: list[_Item], names: list[str], snames: list[str], task: Task, taken: set[str]) -> Var:
    value = cls[0].value
    statics = [it for it in cls if it.static is not None]
    if statics:  # the static the caller passes is the readable name, and its own source
        sname = snames[[s.name for s in task.static].index(statics[0].static)]
        return Var(sname, sname, "dim", value)
    it = next(i for i in cls if i.axes)
    i, j = it.axes[0]
    label = it.label if "." not in it.label else f"{names[i]}_{j}"
    return Var(identifier(label, taken), f"{names[i]}.shape[{j}]", "dim", value)


def _trace(task: Task, shapes: list[tuple[int, ...]], statics: dict[str, Any], changes: dict[_Item, Any],
           floats: dict[str, float]) -> Traced | None:
    import jax

    new = [list(s) for s in shapes]
    st = dict(statics)
    for it, v in changes.items():
        for i, j in it.axes:
            new[i][j] = int(v)
        if it.static is not None:
            st[it.static] = int(v)
    st.update(floats)
    sc = Scale("_probe", shapes=tuple(tuple(s) for s in new), static=st)
    t = task.with_scales({"_probe": sc})
    try:
        closed = jax.make_jaxpr(t.bind(t.reference, "_probe"))(*t.arg_structs("_probe"))
    except Exception as exc:  # noqa: BLE001 - a refusal means "these cannot move like that"
        log.debug("probe of %s refused: %s", task.name, exc)
        return None
    return Traced("_probe", closed, [tuple(s) for s in new])


def _flat_eqns(jaxpr: Any) -> Iterable[Any]:
    for eqn in jaxpr.eqns:
        yield eqn
        for p in eqn.params.values():
            for sub in (p if isinstance(p, (tuple, list)) else (p,)):
                inner = getattr(sub, "jaxpr", sub)
                if hasattr(inner, "eqns"):
                    yield from _flat_eqns(inner)


def _prims(t: Traced) -> tuple:
    out = []
    for e in _flat_eqns(t.jaxpr.jaxpr):
        out.append((e.primitive.name, tuple(_is_literal(a) for a in e.invars), len(e.outvars),
                    tuple(len(v.aval.shape) for v in e.outvars if hasattr(v.aval, "shape"))))
    return tuple(out)


def _is_literal(a: Any) -> bool:
    from jax._src.core import Literal

    return isinstance(a, Literal)


def _scalar(a: Any) -> Any:
    import numpy as np

    if not _is_literal(a):
        return None
    v = np.asarray(a.val)
    return v.item() if v.shape == () else v


# --- fitting ------------------------------------------------------------------------------------------


def _num(v: Any) -> float | None:
    try:
        f = float(v)
    except (TypeError, ValueError):
        return None
    return f


def _close(a: float, b: float, rtol: float = 2e-6) -> bool:
    if math.isnan(a) or math.isnan(b):
        return math.isnan(a) and math.isnan(b)
    if math.isinf(a) or math.isinf(b):
        return a == b
    return math.isclose(a, b, rel_tol=rtol, abs_tol=1e-30)


def _rtol(dtype: Any) -> float:
    """How close a value rounded to ``dtype`` is to the exact one (half an ulp, with room)."""
    import jax.numpy as jnp

    if dtype is None:
        return 2e-6
    try:
        eps = float(jnp.finfo(dtype).eps)
    except (TypeError, ValueError):
        return 2e-6
    return max(2e-6, 1.01 * eps)


#: single-variable forms ``a * g(x) + b`` (``g`` as source, as a function)
_FORMS = (
    ("{x}", lambda x: x),
    ("(1.0 / {x})", lambda x: 1.0 / x),
    ("({x} ** -0.5)", lambda x: x ** -0.5 if x > 0 else math.nan),
    ("({x} ** 0.5)", lambda x: x ** 0.5 if x >= 0 else math.nan),
    ("(1.0 / ({x} - 1))", lambda x: 1.0 / (x - 1) if x != 1 else math.nan),
)


def _nice(c: float, rtol: float = 1e-6, scale: float = 0.0) -> float | int:
    """``c`` snapped to a short rational when it is one to within ``rtol`` (0 when it is below ``rtol * scale``)."""
    if not math.isfinite(c):
        return c
    if abs(c) <= rtol * scale or c == 0:
        return 0
    for d in (1, 2, 3, 4, 8, 10, 16, 100, 1000, 4096):
        fr = Fraction(c).limit_denominator(d)
        if fr != 0 and math.isclose(float(fr), c, rel_tol=rtol):
            return int(fr) if fr.denominator == 1 else float(fr)
    return c


def _fit_one(var: Var, pts: list[tuple[float, float]], integer: bool, tol: float) -> str | None:
    """``a * g(x) + b`` through every point ``(x, y)`` (the first is the base)."""
    scale = max(abs(y) for _, y in pts)
    for form, g in (_FORMS[:1] if integer else _FORMS):
        gs = [g(x) for x, _ in pts]
        if any(not math.isfinite(v) for v in gs) or gs[0] == gs[1]:
            continue
        a = _nice((pts[1][1] - pts[0][1]) / (gs[1] - gs[0]), 4 * tol)
        b = _nice(pts[0][1] - a * gs[0], 4 * tol, scale)
        if not all(_close(a * gv + b, y, tol) for gv, (_, y) in zip(gs, pts)):
            continue
        if len(pts) < 3 and not (a in (1, -1) and b == 0):
            continue  # two points fit any line: only an exact identity is trusted without a third
        if integer and not (float(b).is_integer() and a > 0 and (float(a).is_integer() or (1 / a).is_integer())):
            continue
        return _affine(form.format(x=var.name), a, b, integer)
    return None


def _affine(g: str, a: float | int, b: float | int, integer: bool) -> str:
    if integer and a != 0 and not float(a).is_integer():
        term = f"{g} // {int(round(1 / a))}"
    elif a == 1:
        term = g
    elif a == -1:
        term = f"-{g}"
    else:
        term = f"{_lit(a, integer)} * {g}"
    if b == 0:
        return term if term == g else f"({term})"
    sign = "+" if b > 0 else "-"
    return f"({term} {sign} {_lit(abs(b), integer)})"


def _lit(c: float | int, integer: bool) -> str:
    if integer or isinstance(c, int):
        return str(int(c)) if float(c).is_integer() else repr(float(c))
    return repr(float(c))


_POWERS = (1.0, -1.0, 0.5, -0.5, 2.0, -2.0)


def _factor(x: float, p: float | tuple[str, int]) -> float:
    """``x ** p``, or ``x + b`` for a shift ``p = ("shift", b)``."""
    return x + p[1] if isinstance(p, tuple) else x ** p


def _shift(probes: Probes, var: Var, ks: list[int], vals: list[float], tol: float) -> tuple[str, int] | None:
    """``("shift", b)`` when the values are proportional to ``x + b`` (b a small integer) at ``var``'s probes."""
    x0, y0 = float(var.value), vals[0]
    r = vals[ks[0]] / y0
    if not ks or _close(r, 1.0):
        return None
    b = round((float(probes.probes[ks[0] - 1].value) - r * x0) / (r - 1))
    if b == 0 or abs(b) > 64 or x0 + b <= 0:
        return None
    if all(_close(vals[k] / y0, (float(probes.probes[k - 1].value) + b) / (x0 + b), 3 * tol) for k in ks):
        return ("shift", b)
    return None


def _fit_monomial(probes: Probes, deps: list[tuple[Var, list[int]]], vals: list[float], integer: bool,
                  tol: float) -> str | None:
    """``c * prod(x ** p)`` over the variables the values depend on."""
    y0 = vals[0]
    if y0 == 0:
        return None
    powers = []
    for var, ks in deps:
        x0 = float(var.value)
        p_found = None
        for p in _POWERS:
            if all(_close(vals[k] / y0, (float(probes.probes[k - 1].value) / x0) ** p, 3 * tol) for k in ks):
                p_found = p
                break
        if p_found is None:
            p_found = _shift(probes, var, ks, vals, tol)  # a factor (x + b): a mean over a convolution's output
            if p_found is None:
                return None
        powers.append((var, p_found))
    c = _nice(y0 / math.prod(_factor(float(v.value), p) for v, p in powers), 2 * tol)
    for k in range(len(vals)):
        env = probes.env(k)
        if not _close(c * math.prod(_factor(float(env[v.name]), p) for v, p in powers), vals[k], tol):
            return None
    if any(isinstance(p, tuple) for _, p in powers):
        if integer:
            return None
        factors = [v.name if p == 1 else f"{v.name} ** {_lit(p, False)}" if not isinstance(p, tuple)
                   else _affine(v.name, 1, p[1], True) for v, p in powers if isinstance(p, tuple) or p > 0]
        den = [v.name if p == -1 else f"{v.name} ** {_lit(-p, False)}" for v, p in powers
               if not isinstance(p, tuple) and p < 0]
        top = " * ".join(([_lit(c, False)] if c != 1 else []) + factors) or "1.0"
        return f"({top} / {den[0] if len(den) == 1 else '(' + ' * '.join(den) + ')'})" if den else f"({top})"
    num = [v.name if p == 1 else f"{v.name} ** {_lit(p, False)}" for v, p in powers if p > 0]
    den = [v.name if p == -1 else f"{v.name} ** {_lit(-p, False)}" for v, p in powers if p < 0]
    if integer:
        if any(abs(p) != 1 for _, p in powers):
            return None
        if not float(c).is_integer() and not (1 / c).is_integer():
            return None
        top = " * ".join(([str(int(c))] if float(c).is_integer() and c != 1 else []) + num) or "1"
        below = ([str(int(round(1 / c)))] if not float(c).is_integer() else []) + den
        return f"({top} // {' // '.join(below)})" if below else (top if len(num) <= 1 and c == 1 else f"({top})")
    top = " * ".join(([_lit(c, False)] if c != 1 else []) + num) or "1.0"
    if den:
        below = den[0] if len(den) == 1 else "(" + " * ".join(den) + ")"
        return f"({top} / {below})"
    return top if len(num) == 1 and c == 1 else f"({top})"


#: ``g(sum)`` forms for a value that depends on several variables through their sum: (source, g, g's inverse)
_SUM_FORMS = (
    ("{s}", lambda s: s, lambda y: y),
    ("(({s}) ** -0.5)", lambda s: s ** -0.5 if s > 0 else math.nan, lambda y: y ** -2 if y > 0 else math.nan),
    ("(1.0 / ({s}))", lambda s: 1.0 / s if s else math.nan, lambda y: 1.0 / y if y else math.nan),
)


def _fit_sum(probes: Probes, deps: list[tuple[Var, list[int]]], vals: list[float], integer: bool,
             tol: float) -> str | None:
    """``g(x1 + x2 - x3 ...)`` over the variables the values depend on: a head dim ``nope + rope``, a score scale
    ``(nope + rope) ** -0.5``. Only coefficients of +-1 and no constant: each probe moves one variable, and along
    one variable a product (``B * (S + 1)``, ``h * (nope + rope)``) is a straight line too, so any other line that
    fits the probes may still be wrong where two variables move at once."""
    for form, g, inverse in (_SUM_FORMS[:1] if integer else _SUM_FORMS):
        ys = [inverse(v) for v in vals]
        if not all(math.isfinite(y) for y in ys):
            continue
        terms = []
        for var, ks in deps:
            dx = float(probes.probes[ks[0] - 1].value) - float(var.value)
            a = _nice((ys[ks[0]] - ys[0]) / dx, 8 * tol) if dx else 0
            if a not in (1, -1):  # along one variable a product is a line too (h * (n + r)): only +-x is trusted
                break
            terms.append((var, a))
        else:
            b = _nice(ys[0] - sum(a * float(v.value) for v, a in terms), 8 * tol, abs(ys[0]))
            if b != 0:
                continue
            if not all(_close(g(sum(a * float(probes.env(k)[v.name]) for v, a in terms) + b), vals[k], tol)
                       for k in range(len(vals))):
                continue
            total = " ".join(("+ " if a == 1 else "- ") + v.name for v, a in terms).removeprefix("+ ")
            return form.format(s=total) if form != "{s}" else f"({total})"
    return None
