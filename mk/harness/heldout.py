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
from typing import Any, Mapping

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
    moves = plan.dim_moves()
    statics = plan.static_moves(moves)
    if not moves and not statics:
        return None
    kept = plan.accepted(moves, statics)
    return plan.scale(_free_name(task), *kept) if kept is not None else None


#: name prefix of the fresh-size scale every evaluation adds: ``size-<shape>_<shape>...`` (``48x384_384``)
FRESH = "size-"


def fresh_size(task: Task, rng: Any) -> Scale | None:
    """A size drawn for one evaluation: each dim the held-out scale moves grows by a random 1-4 units from the
    smallest scale (``rng.randbelow``; past the sizes the author was shown and the held-out one), so the held-out
    scale's public, fixed sizes are not the only unseen ones.
    None for tasks with declared held-out scales or their own generator (their sizes are the task's to choose)."""
    if task.heldout is not None or task.native_inputs is not None:
        return None
    plan = _Plan(task)
    dims = plan.dim_moves({d: 1 + rng.randbelow(4) for d in plan.steps()}, avoid=plan.dim_moves())
    if not dims:
        return None
    kept = plan.accepted(dims, plan.static_moves(dims, floats=False))
    if kept is None or not kept[0]:
        return None
    scale = plan.scale("_fresh", *kept)
    shapes = task.with_scales({"_fresh": scale}).shapes("_fresh")
    return Scale(FRESH + "_".join("x".join(map(str, s)) or "1" for s in shapes), shapes=tuple(shapes), static=scale.static)


def sized(task: Task, name: str) -> Scale:
    """The fresh-size scale named ``name`` again (``mk eval --case`` reproduces a fresh-size failure with it)."""
    try:
        shapes = tuple(tuple(int(d) for d in part.split("x")) if part != "1" else () for part in name[len(FRESH):].split("_"))
    except ValueError:
        raise TaskError(f"{name!r} is not a fresh-size scale name", hint=f"it reads {FRESH}<shape>_<shape>..., e.g. {FRESH}48x384_384") from None
    if not name.startswith(FRESH) or len(shapes) != len(task.args):
        raise TaskError(f"{name!r} does not give one shape per input of {task.name!r}")
    plan = _Plan(task)
    dims = {}
    for d in plan.steps():
        i, j = plan.axes[d][0] if not plan.named else _first_axis(task, d)
        dims[d] = shapes[i][j]
    static = plan.static_moves(dims, floats=False)
    return Scale(name, shapes=shapes, static={**dict(plan.base.static), **static})


def _first_axis(task: Task, dim: str) -> tuple[int, int]:
    for i, a in enumerate(task.args):
        for j, d in enumerate(a.shape):
            if d == dim:
                return i, j
    raise TaskError(f"dim {dim!r} is used by no input of {task.name!r}")


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

    def dim_moves(self, k: Mapping[str, int] | None = None, avoid: Mapping[str, int] | None = None) -> dict[str, int]:
        """Each dim grown by ``k[dim]`` units (default 1), and further while the size is one the author was shown
        (or ``avoid[dim]``)."""
        moves = {}
        for d, (base, step, values) in self.steps().items():
            new = base + step * (k or {}).get(d, 1)
            while new in values or new == (avoid or {}).get(d):
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
