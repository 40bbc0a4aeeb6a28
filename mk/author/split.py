"""Split an epilogue at its first statistic across rows (or move of rows): the kernel fuses the row-local part.

A template's epilogue runs on blocks of rows (samples, matrix rows). A
training-mode BatchNorm reduces *across* them, which no block can do alone.
:func:`split_epilogue` emits the eqns up to the first one the row-local
emitter refuses for that reason (or because it reshapes or transposes the
rows themselves, as an output laid out as (1, 1, B, 1) does); the rest (the tail) is emitted as whole-array
code (lead 0) that the written kernel applies to the kernel's output. The tail
may read exactly one value of the fused part (the one the kernel writes) and
the task's other inputs.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Callable

from mk.author.emit import Emitted, Emitter, Unsupported


#: the row-local emitter's refusals that end the fused part: a reduction across rows, a reshape or transpose of them
_TRIGGERS = ("across rows", "changes the row axes", "moves the row axes")


@dataclass
class Split:
    body: Emitted  # the fused part, its one output the kernel's
    kernel_out: Any  # the jaxpr variable the kernel writes
    tail: Emitted | None  # the rest on whole arrays (its input named "y"), or None when nothing is split off
    emitter: Emitter  # the row-local emitter that wrote ``body`` (its group split, for padded blocks)


def split_epilogue(make: Callable[[], Emitter], eqns: list[Any], outvars: list[Any], params: list[tuple[Any, str]],
                   probes: Any, taken: set[str]) -> Split:
    """``make()``: a fresh row-local emitter with the template's bindings; ``params``: (var, name) of the inputs
    the tail may read whole."""
    em = make()
    for k, eqn in enumerate(eqns):
        try:
            em.emit([eqn])
        except Unsupported as exc:
            if not any(why in str(exc) for why in _TRIGGERS):
                raise
            return _split(make, eqns[:k], eqns[k:], outvars, params, probes, taken)
    return Split(em.result(outvars), outvars[0], None, em)


def _split(make: Callable[[], Emitter], prefix: list[Any], rest: list[Any], outvars: list[Any],
           params: list[tuple[Any, str]], probes: Any, taken: set[str]) -> Split:
    from jax._src.core import Literal

    produced = {v for e in prefix for v in e.outvars}
    seeds = [v for e in rest for v in e.invars if not isinstance(v, Literal)]
    bound = make()._names  # the template's own bindings (the product's output ...) count as fused values
    needed = [v for v in dict.fromkeys(seeds) if v in produced or (v in bound and v not in {p for p, _ in params})]
    if len(needed) != 1 or any(v in produced for v in outvars):
        raise Unsupported("the work after a cross-row reduction reads several values of the row-local part")
    em = make()
    em.emit(prefix)
    body = em.result(needed)
    tem = Emitter(0, probes, taken=taken | {"y"})
    tem.bind(needed[0], "y", False)
    for var, name in params:
        tem.bind(var, name, False)
    tem.emit(rest)
    return Split(body, needed[0], tem.result(outvars), em)
