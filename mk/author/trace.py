"""Trace a task's reference at every scale and find which baked-in constants
are really shape-derived (``sum / 256.0`` is ``mean`` over a 256-wide axis).

Literals that differ between scales are matched against expressions over the
inputs' trailing dims (``d``, ``1/d``, ``d**-0.5`` ...) that fit every scale;
the emitter then writes the expression instead of the number, so a generated
kernel is correct for shapes it was never traced at.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any, Callable

from mk.author.emit import Unsupported
from mk.task import Task

_FORMS: tuple[tuple[str, Callable[[float], float]], ...] = (
    ("{d}", lambda d: d),
    ("(1.0 / {d})", lambda d: 1.0 / d),
    ("({d} ** -0.5)", lambda d: d**-0.5),
    ("({d} ** 0.5)", lambda d: d**0.5),
    ("({d} - 1)", lambda d: d - 1.0),
    ("(1.0 / ({d} - 1))", lambda d: 1.0 / (d - 1) if d != 1 else math.inf),
)


@dataclass
class Traced:
    scale: str
    jaxpr: Any  # ClosedJaxpr
    shapes: list[tuple[int, ...]]


def trace_scales(task: Task) -> list[Traced]:
    import jax

    out = []
    for name in task.scales:
        closed = jax.make_jaxpr(task.bind(task.reference, name))(*task.arg_structs(name))
        out.append(Traced(name, closed, task.shapes(name)))
    return out


def _literals(jaxpr: Any) -> list[Any]:
    from jax._src.core import Literal

    found = []
    for eqn in jaxpr.eqns:
        for a in eqn.invars:
            if isinstance(a, Literal):
                found.append(a)
        for p in eqn.params.values():
            sub = getattr(p, "jaxpr", None)
            if sub is not None and hasattr(sub, "eqns"):
                found.extend(_literals(sub))
            elif hasattr(p, "eqns"):
                found.extend(_literals(p))
    return found


def symbolic_literals(traced: list[Traced], trailing_from: int) -> dict[int, str]:
    """Map literal id (in ``traced[0]``'s jaxpr) -> source expression.

    ``trailing_from``: dims at or after this axis of each input are candidates
    (row axes are not: a block does not know the number of rows)."""
    if len(traced) < 2:
        return {}
    lits = [_literals(t.jaxpr.jaxpr) for t in traced]
    if len({len(x) for x in lits}) != 1:
        raise Unsupported("the computation's structure changes between scales")
    exprs: dict[int, str] = {}
    for pos, lit0 in enumerate(lits[0]):
        values = [float(_scalar(l[pos])) for l in lits]
        if all(v == values[0] for v in values):
            continue
        expr = _find_expr(values, traced, trailing_from)
        if expr is None:
            raise Unsupported(f"a constant changes between scales ({values}) and is not a function of an input dim")
        exprs[id(lit0)] = expr
    return exprs


def _scalar(lit: Any) -> float:
    import numpy as np

    return np.asarray(lit.val).item()


def _find_expr(values: list[float], traced: list[Traced], trailing_from: int) -> str | None:
    first = traced[0].shapes
    for i, shape in enumerate(first):
        for axis in range(trailing_from, len(shape)):
            neg = axis - len(shape)
            for form, fn in _FORMS:
                ok = True
                for v, t in zip(values, traced):
                    d = float(t.shapes[i][axis])
                    if not math.isclose(fn(d), v, rel_tol=1e-6, abs_tol=1e-12):
                        ok = False
                        break
                if ok:
                    return form.format(d=f"a{i}.shape[{neg}]")
    return None
