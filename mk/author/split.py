"""Split an epilogue at its first statistic across rows (or move of rows, or further matrix product): the kernel
fuses the row-local part.

A template's epilogue runs on blocks of rows (samples, matrix rows). A
training-mode BatchNorm reduces *across* them, which no block can do alone.
:func:`split_epilogue` emits the eqns up to the first one the row-local
emitter refuses for that reason (or because it reshapes or transposes the
rows themselves, as an output laid out as (1, 1, B, 1) does, or because it is a second matrix product or reads
an input that is not row-aligned, as a second layer of an MLP does); the rest (the tail) is emitted as whole-array
code (lead 0) that the written kernel applies to the kernel's output. The tail
may read exactly one value of the fused part (the one the kernel writes) and
the task's other inputs.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Callable

from mk.author.emit import Emitted, Emitter, Unsupported, dtype_expr
from mk.author.pooling import PoolEmitter
from mk.author.ir import xla_precision


#: the row-local emitter's refusals that end the fused part: a reduction across rows, a reshape or transpose of them,
#: a further matrix product (a second layer)
_TRIGGERS = ("across rows", "changes the row axes", "moves the row axes", "a matrix product inside the row-wise part")


class WholeEmitter(PoolEmitter):
    """The emitter of work on whole arrays after a kernel (lead 0, run by XLA): besides the block-local forms it
    writes matrix products and window reductions as the ``lax`` calls they are."""

    def __init__(self, probes: Any, taken: set[str]):
        super().__init__(0, probes, taken=taken)

    def _eqn(self, eqn: Any) -> None:
        prim = eqn.primitive.name
        if prim not in ("dot_general", "reduce_window_sum"):
            return super()._eqn(eqn)
        self.out.primitives.add(prim)
        ins = [self._ref(a) for a in eqn.invars]
        p = eqn.params
        if prim == "dot_general":
            f32 = any(str(getattr(a.aval, "dtype", "")) == "float32" for a in eqn.invars)
            prec_expr = xla_precision(p.get("precision"), f32)  # a dot XLA runs: HIGHEST where the task is float32
            pref = p.get("preferred_element_type")
            pref_expr = "None" if pref is None else dtype_expr(pref)
            (lc, rc), (lb, rb) = p["dimension_numbers"]
            dims = f"(({tuple(lc)!r}, {tuple(rc)!r}), ({tuple(lb)!r}, {tuple(rb)!r}))"
            self._set(eqn.outvars[0], f"lax.dot_general({ins[0][0]}, {ins[1][0]}, {dims}, precision={prec_expr}, "
                      f"preferred_element_type={pref_expr})", 0)
            return
        peers = self.probes.peers(eqn) if self.probes is not None else [eqn]

        def static(key: str) -> str:
            parts = []
            for k in range(len(p[key])):
                try:
                    parts.append(self.probes.dim([e.params[key][k] for e in peers]) if self.probes is not None
                                 else str(p[key][k]))
                except ValueError as exc:
                    raise Unsupported(str(exc)) from exc
            return "(" + ", ".join(parts) + ("," if len(parts) == 1 else "") + ")"

        if any(tuple(pad) != (0, 0) for pad in p["padding"]) or any(d != 1 for d in (*p["base_dilation"],
                                                                                      *p["window_dilation"])):
            raise Unsupported("a padded or dilated window reduction")
        self._set(eqn.outvars[0], f"lax.reduce_window({ins[0][0]}, jnp.asarray(0, {ins[0][0]}.dtype), lax.add, "
                  f"{static('window_dimensions')}, {static('window_strides')}, 'VALID')", 0)


def whole_epilogue(eqns: list[Any], product: Any, outvars: list[Any], params: list[tuple[Any, str]], probes: Any,
                   taken: set[str]) -> Emitted:
    """``eqns`` (the work after a kernel's product ``product``) as whole-array code on ``y`` (the product) and the
    ``params`` (var, name): an epilogue that runs in XLA after the kernel."""
    em = WholeEmitter(probes, taken | {"y"})
    em.bind(product, "y", False)
    for var, name in params:
        em.bind(var, name, False)
    em.emit(eqns)
    return em.result(outvars)


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
    from jax._src.core import Literal

    em = make()
    whole = {v for v, _ in params} - set(em._names)  # inputs the row-local part cannot read (not row-aligned)
    for k, eqn in enumerate(eqns):
        try:
            em.emit([eqn])
        except Unsupported as exc:
            reads = {v for v in eqn.invars if not isinstance(v, Literal)}
            if not any(why in str(exc) for why in _TRIGGERS) and not whole & reads:
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
    tem = WholeEmitter(probes, taken | {"y"})
    tem.bind(needed[0], "y", False)
    for var, name in params:
        tem.bind(var, name, False)
    tem.emit(rest)
    return Split(body, needed[0], tem.result(outvars), em)
