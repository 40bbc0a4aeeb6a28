"""Held-out scales: input sizes and static values the author never sees, judged with every candidate.

A kernel that divides by the hidden size it was shown, or hard-codes ``eps``,
passes every case at the sizes it was written for. A held-out scale changes
those numbers while keeping the task's own constraints, so such a kernel is
``incorrect`` before it is ever kept.

A task declares its held-out scales (``Task.heldout``) or lets them be derived
here from its scales:

* every dim (a named dim, or, for tasks given as per-input shapes, each group of
  axes that are equal at every scale) grows from the smallest scale's value by
  its *unit*: the largest power of two dividing it at every scale, at most 128
  (a lane's width), so 256 becomes 384 and 16 becomes 32 (further, where that size
  is one the author was shown); ``Task.dim_units`` sets the unit per dim (``0``
  pins a dim); dims that are 1 everywhere stay 1;
* float statics move far enough to change the result (``eps=1e-5`` becomes
  ``0.25``, ``temperature=1.0`` becomes ``2.0``); an int static equal to one dim
  at every scale follows that dim; other statics stay (``Task.vary_static``
  names a value per static, ``None`` pins it);
* the reference must accept the result (``jax.eval_shape``); a dim or static it
  refuses is left as it was, with a logged note.

A task whose inputs come from its own generator (``native_inputs``) draws its
shapes there, so nothing is derived for it: it declares its held-out scales,
with a layout its generator knows, or has none (the envelope then pins its
shapes).
"""

from __future__ import annotations

import logging
import math
from typing import Any, Mapping, Sequence

from mk.errors import TaskError
from mk.task import Scale, Task

log = logging.getLogger(__name__)

NAME = "heldout"
MAX_UNIT = 128


def heldout_scales(task: Task) -> tuple[Scale, ...]:
    """The task's held-out scales: declared, or derived from its scales (see the module doc)."""
    if task.heldout is not None:
        for s in task.heldout:
            if s.name in task.scales:
                raise TaskError(f"task {task.name!r}: held-out scale {s.name!r} has the name of one of its scales",
                                path=task.source, hint="give held-out scales their own names")
        return tuple(task.heldout)
    if task.native_inputs is not None:
        log.info("task %s draws its inputs with its own generator and declares no held-out scale", task.name)
        return ()
    scale = derive(task)
    return (scale,) if scale is not None else ()


def unit(values: list[int]) -> int:
    """The multiple a dim keeps: the largest power of two dividing all its values, at most :data:`MAX_UNIT`."""
    g = 0
    for v in values:
        g = math.gcd(g, int(v))
    if g <= 0:
        return 0
    return min(g & -g, MAX_UNIT)


def other_float(v: float) -> float:
    """A float static moved far enough to change a result (``eps`` included)."""
    if not math.isfinite(v):
        return v
    return 0.25 if abs(v) < 0.05 else 2.0 * v


def derive(task: Task) -> Scale | None:
    """One held-out scale grown from the smallest scale, or None when nothing may vary."""
    plan = _Plan(task)
    moves = plan.dim_moves(untie=True)
    statics = plan.static_moves(moves)
    if not moves and not statics:
        return None
    tied = plan.dim_moves()
    if moves != tied and not plan.traces(moves, statics):  # the reference needs the coinciding dims equal
        moves, statics = tied, plan.static_moves(tied)
    kept = plan.accepted(moves, statics)
    return plan.scale(_free_name(task), *kept) if kept is not None else None


#: name prefix of the fresh-size scale every evaluation adds: ``size-<shape>_<shape>...`` (``48x384_384``)
FRESH = "size-"


#: a fresh size may grow each moved dim up to this many units past the smallest scale (further past sizes the author
#: saw); the envelope claims up to there
FRESH_UNITS = 4
#: draws tried before a fresh size falls back to the plain growth rule (a reference that refuses most sizes)
_TRIES = 48
#: a fresh size is the cheapest (fewest input elements) of this many draws: breaking relations pushes draws up the
#: box, and an interpreted attention kernel at the box's top corner runs for minutes
_CHOICES = 4


class _Fresh:
    """What a fresh size may change: the dims and statics the held-out scale moved, dims equal at every judged
    size moving together, so a fresh size stays inside the envelope the suite verifies.

    Each group of dims ranges over what the envelope claims for it: every multiple of the gcd of its judged values
    from the smallest judged value to the top (the largest judged value, or :data:`FRESH_UNITS` units past the
    smallest scale). Every evaluation draws two sizes in that box (:func:`fresh_sizes`): a *strict* one, where every
    group takes a value no judged size had and no two groups keep a relation every judged size satisfied (``n = m +
    32``, ``n = 4 m``: with two judged sizes every pair of dims lies on one line), and, with two groups or more, a
    *loose* one drawn from the whole box (judged values included), so mixes such as (authoring ``m``, fresh ``n``)
    are judged too. Every point the envelope admits can be drawn."""

    def __init__(self, task: Task):
        self.task = task
        self.plan = _Plan(task)
        moves = self.plan.dim_moves()
        kept = self.plan.accepted(moves, self.plan.static_moves(moves))
        self.held_dims, self.held_static = kept if kept is not None else ({}, {})
        groups: dict[tuple[Any, ...], list[str]] = {}
        for d in self.held_dims:
            groups.setdefault((tuple(self.plan.value(n, d) for n in task.scales), self.held_dims[d]), []).append(d)
        self.groups = list(groups.values())
        base = dict(zip((s.name for s in task.static), task.static_values(self.plan.base.name)))
        self.floats = {k: (base[k], v) for k, v in self.held_static.items() if isinstance(v, float) and isinstance(base[k], float)}
        steps = self.plan.steps()
        #: per group, its judged values (the authoring scales', then the held-out one)
        self.judged = [[*steps[g[0]][2], self.held_dims[g[0]]] for g in self.groups]
        tops = self.tops()
        self.domains = []
        for g, values in zip(self.groups, self.judged):
            step = 0
            for v in values:
                step = math.gcd(step, int(v))
            top = max(max(values), tops[g[0]])
            self.domains.append(list(range(min(values), top + 1, step)) if step > 0 else sorted(set(values)))
        self.points = {tuple(self.plan.value(n, g[0]) for g in self.groups) for n in task.scales}
        self.points.add(tuple(self.held_dims[g[0]] for g in self.groups))

    def dims(self, k: Mapping[str, int]) -> dict[str, int]:
        grown = self.plan.dim_moves({d: k[g[0]] for g in self.groups for d in g}, avoid=self.held_dims)
        return {d: grown[d] for d in self.held_dims}

    def tops(self) -> dict[str, int]:
        return self.dims({g[0]: FRESH_UNITS for g in self.groups})

    def of_groups(self, values: Sequence[int]) -> dict[str, int]:
        return {d: int(v) for g, v in zip(self.groups, values) for d in g}

    def cost(self, values: Sequence[int]) -> int:
        """The input elements of the size these group values give."""
        scale = self.plan.scale("_cost", self.of_groups(values), {})
        return sum(math.prod(s) for s in self.task.with_scales({"_cost": scale}).shapes("_cost"))

    def off_lines(self, values: Sequence[int]) -> bool:
        """No pair of groups keeps a relation (a line through the judged sizes' values) every judged size kept."""
        for a in range(len(self.groups)):
            for b in range(a + 1, len(self.groups)):
                pts = sorted({(p[a], p[b]) for p in self.points})
                if len(pts) < 2:
                    continue
                (x0, y0), (x1, y1) = pts[0], pts[1]
                if all((x1 - x0) * (y - y0) == (y1 - y0) * (x - x0) for x, y in pts) and \
                        (x1 - x0) * (values[b] - y0) == (y1 - y0) * (values[a] - x0):
                    return False
        return True

    def draw(self, rng: Any, strict: bool) -> list[int] | None:
        pools = [[v for v in dom if v not in judged] if strict else dom for dom, judged in zip(self.domains, self.judged)]
        if any(not pool for pool in pools):
            return None
        for _ in range(_TRIES):
            values = [_pick(pool, rng) for pool in pools]
            if tuple(values) in self.points or (strict and not self.off_lines(values)):
                continue
            return values
        return None

    def axes_of(self, dim: str) -> list[tuple[int, int]]:
        if not self.plan.named:
            return list(self.plan.axes[dim])
        return [(i, j) for i, a in enumerate(self.task.args) for j, d in enumerate(a.shape) if d == dim]

    def scale(self, name_dims: Mapping[str, int], floats: Mapping[str, float]) -> Scale | None:
        static = {**self.plan.static_moves(name_dims, floats=False), **floats}
        static = {k: v for k, v in static.items() if k in self.held_static}
        if not self.plan.traces(name_dims, static):
            return None
        scale = self.plan.scale("_fresh", name_dims, static)
        shapes = self.task.with_scales({"_fresh": scale}).shapes("_fresh")
        name = FRESH + "_".join("x".join(map(str, sh)) if sh else "scalar" for sh in shapes)
        name += "".join(f"~{k}={v!r}" for k, v in sorted(floats.items()))
        return Scale(name, shapes=tuple(shapes), static=scale.static)


def _pick(pool: Sequence[int], rng: Any) -> int:
    """A value of ``pool`` (ascending), each half as likely as the one before (the last takes what is left): every
    value can be drawn, and a case costs about what the old 1-4-unit growth cost (the largest corner of the box, with
    every dim at its top, is rare; an interpreted attention kernel there runs for minutes)."""
    for v in pool[:-1]:
        if rng.randbelow(2) == 0:
            return v
    return pool[-1]


def _fresh(task: Task) -> _Fresh | None:
    if task.heldout is not None or task.native_inputs is not None:
        return None
    fresh = _Fresh(task)
    return fresh if fresh.held_dims else None


def fresh_tops(task: Task) -> dict[tuple[int, int], int]:
    """Per input axis a fresh size may move, the largest size it may draw (what the envelope claims up to)."""
    fresh = _fresh(task)
    if fresh is None:
        return {}
    return {ax: top for d, top in fresh.tops().items() for ax in fresh.axes_of(d)}


def fresh_size(task: Task, rng: Any, strict: bool = True) -> Scale | None:
    """A size drawn for one evaluation from a secret source (``rng.randbelow``) inside the box the envelope claims
    (see :class:`_Fresh`): ``strict``, every group of dims the held-out scale moved takes a value no judged size had,
    off every relation between two groups that the judged sizes all kept; else anywhere in the box but a judged
    point. Each float static the held-out scale moved is drawn between its two values. The held-out scale's sizes
    are public; this one is not. None for tasks with declared held-out scales or their own generator (or, loose,
    with one group)."""
    fresh = _fresh(task)
    if fresh is None or (not strict and len(fresh.groups) < 2):
        return None
    floats = {k: _between(a, b, rng) for k, (a, b) in fresh.floats.items()}
    for _ in range(_TRIES // _CHOICES):
        drawn = [v for v in (fresh.draw(rng, strict) for _ in range(_CHOICES)) if v is not None]
        if not drawn:
            break
        for values in sorted(drawn, key=fresh.cost):  # the cheapest of a few draws first: every point stays drawable
            scale = fresh.scale(fresh.of_groups(values), floats)
            if scale is not None:
                return scale
    if not strict:
        return None
    return fresh.scale(fresh.dims({g[0]: 1 + rng.randbelow(FRESH_UNITS) for g in fresh.groups}), floats)


def fresh_sizes(task: Task, rng: Any) -> list[Scale]:
    """The fresh sizes one evaluation adds: a strict one and, with two groups of dims or more, a loose one."""
    out: list[Scale] = []
    for strict in (True, False):
        scale = fresh_size(task, rng, strict)
        if scale is not None and scale.name not in {s.name for s in out}:
            out.append(scale)
    return out


def _between(a: float, b: float, rng: Any) -> float:
    """A value between ``a`` and ``b`` (log-uniform when both are positive), rounded to 6 significant digits."""
    u = rng.randbelow(10**6) / 10**6
    lo, hi = min(a, b), max(a, b)
    value = lo * (hi / lo) ** u if lo > 0 else lo + (hi - lo) * u
    return float(f"{value:.6g}")


def sized(task: Task, name: str) -> Scale:
    """The fresh-size scale named ``name`` again (``mk eval --case`` reproduces a fresh-size failure with it);
    a TaskError when the name is not one this task's fresh sizes can have."""
    fresh = _fresh(task)
    if fresh is None:
        raise TaskError(f"task {task.name!r} draws no fresh sizes (its held-out sizes are declared, or its inputs come from "
                        "its own generator)", hint="use a key of one of the suite's own cases")
    body, *static_parts = name[len(FRESH):].split("~") if name.startswith(FRESH) else ("", )
    example = f"e.g. {fresh.scale(fresh.dims({g[0]: 1 for g in fresh.groups}), {k: b for k, (a, b) in fresh.floats.items()}).name}"
    try:
        shapes = tuple(() if part == "scalar" else tuple(int(d) for d in part.split("x")) for part in body.split("_"))
        floats = {k: float(v) for k, v in (p.split("=", 1) for p in static_parts)}
    except ValueError:
        raise TaskError(f"{name!r} is not a fresh-size scale name", hint=f"it reads {FRESH}<shape>_<shape>...[~static=value]; {example}") from None
    ranks = [len(s) for s in task.shapes(fresh.plan.base.name)]
    if not name.startswith(FRESH) or [len(s) for s in shapes] != ranks:
        raise TaskError(f"{name!r} does not give one shape per input of {task.name!r} (ranks {ranks})", hint=example)
    dims = {}
    for g, domain in zip(fresh.groups, fresh.domains):
        for d in g:
            values = {shapes[i][j] for i, j in fresh.axes_of(d)}
            v = values.pop() if len(values) == 1 else -1
            if v not in domain:
                step = domain[1] - domain[0] if len(domain) > 1 else 0
                raise TaskError(f"{name!r}: dim {d} must be one size, a multiple of {step} from {domain[0]} to {domain[-1]}",
                                hint=example)
            dims[d] = v
        if len({dims[d] for d in g}) > 1:
            raise TaskError(f"{name!r}: dims {', '.join(g)} move together (equal at every judged size)", hint=example)
    for k, v in floats.items():
        if k not in fresh.floats or not min(fresh.floats[k]) <= v <= max(fresh.floats[k]):
            raise TaskError(f"{name!r}: static {k} is not one a fresh size draws", hint=example)
    scale = fresh.scale(dims, floats)
    if scale is None or [list(s) for s in scale.shapes] != [list(s) for s in shapes]:
        raise TaskError(f"{name!r} is not a size this task's fresh sizes can have", hint=example)
    return Scale(name, shapes=scale.shapes, static=scale.static)


class _Plan:
    """The smallest scale and its dims: named dims, or groups of axes equal at every scale."""

    def __init__(self, task: Task):
        self.task = task
        self.base = min(task.scales.values(), key=lambda s: sum(math.prod(x) for x in task.shapes(s.name)))
        self.named = self.base.shapes is None and any(isinstance(d, str) for a in task.args for d in a.shape)
        self.axes: dict[str, list[tuple[int, int]]] = {}
        if not self.named:  # x (M, K) @ w (K, N): the two K axes move together, as one dim
            per_scale = {n: task.shapes(n) for n in task.scales}
            groups: dict[tuple[int, ...], list[tuple[int, int]]] = {}
            for i, shape in enumerate(per_scale[self.base.name]):
                for j in range(len(shape)):
                    groups.setdefault(tuple(int(per_scale[n][i][j]) for n in task.scales), []).append((i, j))
            self.axes = {f"axes{axes}": axes for axes in groups.values()}

    def value(self, scale: str, dim: str) -> int:
        if dim in self.axes:
            i, j = self.axes[dim][0]
            return int(self.task.shapes(scale)[i][j])
        return int(self.task.scales[scale].dims.get(dim, -1))

    def dims(self) -> list[str]:
        if self.named:
            return sorted({d for a in self.task.args for d in a.shape if isinstance(d, str)})
        return list(self.axes)

    def steps(self) -> dict[str, tuple[int, int, list[int]]]:
        """Each dim that may move -> (its value at the smallest scale, its unit, its values at every scale)."""
        out = {}
        for d in self.dims():
            values = [self.value(n, d) for n in self.task.scales if not self.named or d in self.task.scales[n].dims]
            step = self.task.dim_units[d] if d in self.task.dim_units else (0 if max(values) <= 1 else unit(values))
            if step and step > 0:
                out[d] = (self.value(self.base.name, d), int(step), values)
        return out

    def dim_moves(self, k: Mapping[str, int] | None = None, avoid: Mapping[str, int] | None = None,
                  untie: bool = False) -> dict[str, int]:
        """Each dim grown by ``k[dim]`` units (default 1), and further while the size is one the author was shown
        (or ``avoid[dim]``); with ``untie``, also while it equals the new size of another named dim it equals at the
        smallest scale (K = N = 256 at ``ci`` is a coincidence of the author's sizes: the held-out size parts them,
        so neither the kernel nor the envelope may tie them)."""
        moves: dict[str, int] = {}
        steps = self.steps()
        for d, (base, step, values) in steps.items():
            new = base + step * (k or {}).get(d, 1)
            while new in values or new == (avoid or {}).get(d) or (
                    untie and any(moves[e] == new and steps[e][0] == base for e in moves)):
                new += step
            moves[d] = new
        return moves

    def static_moves(self, dims: Mapping[str, int], floats: bool = True) -> dict[str, Any]:
        task = self.task
        per_scale = {n: task.static_values(n) for n in task.scales}
        moves: dict[str, Any] = {}
        for k, s in enumerate(task.static):
            v = per_scale[self.base.name][k]
            if s.name in task.vary_static:
                if task.vary_static[s.name] is not None and floats:
                    moves[s.name] = task.vary_static[s.name]
            elif isinstance(v, float) and other_float(v) != v and floats:
                moves[s.name] = other_float(v)
            elif isinstance(v, int) and not isinstance(v, bool):  # an int static equal to one dim everywhere follows it
                follows = [d for d in dims if all(self.value(n, d) == per_scale[n][k] for n in task.scales)]
                if len(follows) == 1:
                    moves[s.name] = dims[follows[0]]
        return moves

    def scale(self, name: str, dims: Mapping[str, int], static: Mapping[str, Any]) -> Scale:
        merged = {**dict(self.base.static), **static}
        if self.named:
            return Scale(name, dims={**dict(self.base.dims), **dims}, static=merged)
        shapes = [list(s) for s in self.task.shapes(self.base.name)]
        for group, new in dims.items():
            for i, j in self.axes[group]:
                shapes[i][j] = new
        return Scale(name, shapes=tuple(tuple(s) for s in shapes), static=merged)

    def traces(self, dims: Mapping[str, int], static: Mapping[str, Any]) -> bool:
        import jax

        trial = self.task.with_scales({"_trial": self.scale("_trial", dims, static)})
        try:
            jax.eval_shape(trial.bind(trial.reference, "_trial"), *trial.arg_structs("_trial"))
        except Exception as exc:  # noqa: BLE001 - any refusal by the reference means "not this move"
            log.debug("held-out trial of %s refused: %s", self.task.name, exc)
            return False
        return True

    def accepted(self, dims: dict[str, int], static: dict[str, Any]) -> tuple[dict[str, int], dict[str, Any]] | None:
        """The moves the reference accepts: all of them, or else each one, added while it still accepts them."""
        if self.traces(dims, static):
            return dims, static
        kept_d: dict[str, int] = {}
        kept_s: dict[str, Any] = {}
        for kind, k, v in [("dim", k, v) for k, v in dims.items()] + [("static", k, v) for k, v in static.items()]:
            d = {**kept_d, k: v} if kind == "dim" else kept_d
            s = {**kept_s, k: v} if kind == "static" else kept_s
            if self.traces(d, s):
                kept_d, kept_s = d, s
            else:
                log.info("task %s: the reference refuses held-out %s %s=%r; it keeps its value", self.task.name, kind, k, v)
        return (kept_d, kept_s) if kept_d or kept_s else None


def _free_name(task: Task) -> str:
    name, i = NAME, 1
    while name in task.scales:
        i += 1
        name = f"{NAME}{i}"
    return name
