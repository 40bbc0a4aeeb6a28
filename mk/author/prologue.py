"""A row-wise prologue before a matrix product: the norm (LayerNorm, RMSNorm, a scale) that computes the product's left
operand from an input, as its own whole-rows kernel.

Model code normalises the rows of ``x`` and then multiplies (a pre-norm MLP, ``RMSNorm -> Dense``). The recognisers
of the product (:mod:`mk.author.swiglu`) read the left operand as an input; where it is computed, :func:`find` takes
the eqns that compute it from one row input and parameters (read whole by every block: a scale, a bias), emits them
as a block-local body (:class:`mk.author.emit.Emitter`, reductions over the last axis only, padding masked for Triton)
and :func:`call_lines` writes the call of :mod:`mk.kernels.rowwise`'s skeleton that runs it before the product's
kernel. Both are Pallas kernels: no work is left to XLA. The normalised rows make one round trip through HBM (a
(M, E) array, small beside the product's weights); fusing the norm into the product's row blocks is not done.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any, Sequence


from mk.author.emit import Emitted, Emitter, Unsupported
from mk.author.probe import Probes
from mk.kernels.rowwise.config import Shapes as RowShapes, budget as row_budget, space as rows_space
from mk.targets import kernel_language

#: names the written prologue takes in the kernel file
NAMES = frozenset({"_prologue", "_rows", "_rw_block", "_rw_kernel", "_rw_flatten", "_rw_block_structs", "_rw_fit",
                   "_rw_pow2", "_rw_pad", "rowwise_tpu", "rowwise_gpu"})


@dataclass(frozen=True)
class Prologue:
    """The eqns computing ``out`` (the product's left operand) from input ``row`` (its rows) and ``params``."""

    out: Any
    eqns: tuple[Any, ...]
    row: int
    params: tuple[int, ...]
    lead: int
    body: Emitted
    used: tuple[Any, ...]  # probe variables (statics, sizes) the body reads, as keyword arguments


def find(jaxpr: Any, out: Any, names: list[str], probes: Probes, target: str, taken: set[str]) -> Prologue:
    """The row-wise computation of ``out`` from the inputs, emitted as a block body; Unsupported where ``out`` is not
    computed row by row from one input shaped like it (the same leading axes)."""
    ins = list(jaxpr.invars)
    producers = {v: e for e in jaxpr.eqns for v in e.outvars}
    eqns = feeding(jaxpr.eqns, out, producers, set())
    if any(e.primitive.name == "dot_general" for e in eqns):
        raise Unsupported("the product's left operand is computed through a matrix product")
    read = [v for e in eqns for v in e.invars if type(v).__name__ != "Literal" and v in ins]
    lead = len(out.aval.shape) - 1
    rows = [v for v in dict.fromkeys(read) if tuple(v.aval.shape[:lead]) == tuple(out.aval.shape[:lead])
            and len(v.aval.shape) == len(out.aval.shape)]
    if len(rows) != 1:
        raise Unsupported(f"the product's left operand is computed from {len(rows)} inputs shaped like it, not one "
                          "(a row-wise prologue reads one)")
    params = [v for v in dict.fromkeys(read) if v is not rows[0]]
    em = Emitter(lead, probes, mask=kernel_language(target) == "triton", taken=taken | NAMES)
    em.bind(rows[0], names[ins.index(rows[0])], True)
    for v in params:
        em.bind(v, names[ins.index(v)], False)
    em.emit(eqns)
    body = em.result([out])
    return Prologue(out, tuple(eqns), ins.index(rows[0]), tuple(ins.index(v) for v in params), lead, body,
                    tuple(probes.used(*body.lines, *body.outputs)))


def body_lines(pro: Prologue, names: list[str]) -> list[str]:
    """The written ``_prologue`` function: the reference's row-wise computation on one block of rows."""
    args = [names[pro.row], *(names[i] for i in pro.params)]
    kw = ", ".join(v.name for v in pro.used)
    return [f"def _prologue({', '.join(args)}{', *, ' + kw if kw else ''}):",
            '    """The reference before its product, on one block of whole rows."""',
            *[f"    {line}" for line in pro.body.lines],
            f"    return ({pro.body.outputs[0]},)"]


def call_lines(pro: Prologue, names: list[str], target: str, shapes: list[tuple[int, ...]], itemsizes: list[int],
               result: str) -> list[str]:
    """Lines of ``kernel`` that run the prologue over whole rows (:mod:`mk.kernels.rowwise`) into ``result``;
    ``shapes``/``itemsizes``: the row input's and the result's, at the authoring size, for the row block."""
    gpu = kernel_language(target) == "triton"
    rows = math.prod(shapes[0][:pro.lead])
    row_bytes = sum(math.prod(s[pro.lead:]) * n for s, n in zip(shapes, itemsizes))
    sublanes = 8 * max(1, 4 // min(itemsizes))
    block = rows_space(target, RowShapes(rows, row_bytes, sublanes))[-1]
    ins = [names[pro.row], *(names[i] for i in pro.params)]
    flags = tuple([True] + [False] * len(pro.params))
    bind = ", ".join(f"{v.name}={v.source}" for v in pro.used)
    body = f"functools.partial(_prologue, {bind})" if bind else "_prologue"
    if gpu:
        call = (f"rowwise_gpu({body}, [{', '.join(ins)}], row_inputs={flags!r}, lead={pro.lead}, block_rows={block}, "
                f"budget={row_budget(target)})")
    else:
        call = (f"rowwise_tpu({body}, [{', '.join(ins)}], row_inputs={flags!r}, lead={pro.lead}, block_rows={block}, "
                f"sublanes={sublanes}, budget={row_budget(target)})")
    return [f"    {result} = {call}[0]  # the row-wise prologue, its own kernel"]



def feeding(eqns: Sequence[Any], v: Any, producers: dict[Any, Any], stop: set[int]) -> list[Any]:
    """The eqns (of ``eqns``, in their order) that compute ``v``, back to the inputs and the values whose ids are in
    ``stop``."""
    found: set[int] = set()
    stack = [v]
    while stack:
        x = stack.pop()
        e = None if type(x).__name__ == "Literal" else producers.get(x)
        if e is None or id(e) in found or any(id(o) in stop for o in e.outvars):
            continue
        found.add(id(e))
        stack.extend(e.invars)
    return [e for e in eqns if id(e) in found]
