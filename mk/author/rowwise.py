"""Row-wise template: whole rows per block.

Applies when every output row depends only on the same row of the inputs
(norms, softmax, logsumexp, activations, long elementwise chains): the
reference's own computation, emitted block-local by :mod:`mk.author.emit`,
runs inside one ``pallas_call`` over blocks of ``block_rows`` rows, with
parameters (weights, biases) resident for every block.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from mk.author.emit import Emitter, Unsupported
from mk.author.proposal import Proposal
from mk.author.trace import Traced, symbolic_literals
from mk.task import Task, np_dtype

#: on-chip budget for the double-buffered blocks of one grid step (bytes)
_BUDGET = {"tpu": 16 * 2**20, "gpu": 96 * 2**10 * 4, "cpu": 64 * 2**20}


@dataclass(frozen=True)
class RowLayout:
    lead: int
    rows: tuple[int, ...]
    row_inputs: tuple[bool, ...]


def find_layout(traced: Traced) -> RowLayout:
    shapes = traced.shapes
    outs = [tuple(v.aval.shape) for v in traced.jaxpr.jaxpr.outvars]
    big = max(range(len(shapes)), key=lambda i: math.prod(shapes[i]) if shapes[i] else 0)
    for lead in range(len(shapes[big]) - 1, 0, -1):
        rows = shapes[big][:lead]
        if all(o[:lead] == rows for o in outs):
            return RowLayout(lead, rows, tuple(s[:lead] == rows for s in shapes))
    raise Unsupported("the outputs do not share leading row axes with the largest input")


def propose(task: Task, traced: list[Traced], target: str) -> Proposal:
    t0 = traced[0]
    layout = find_layout(t0)
    if len(traced) > 1:
        for t in traced[1:]:
            other = find_layout(t)
            if other.lead != layout.lead or other.row_inputs != layout.row_inputs:
                raise Unsupported("the row layout changes between scales")
    symbolic = symbolic_literals(traced, trailing_from=layout.lead)
    em = Emitter(layout.lead, symbolic)
    jaxpr = t0.jaxpr.jaxpr
    if jaxpr.constvars:
        raise Unsupported("the reference closes over array constants")
    for i, (var, row) in enumerate(zip(jaxpr.invars, layout.row_inputs)):
        em.bind(var, f"a{i}", row)
    em.emit(jaxpr.eqns)
    body = em.result(jaxpr.outvars)
    if "dot_general" in body.primitives:
        raise Unsupported("a matrix product: use the matmul template")
    largest_row = max(math.prod(s[layout.lead:]) * np_dtype(a.dtype).itemsize for s, a, r in zip(t0.shapes, task.args, layout.row_inputs) if r)
    space = _block_rows_space(target, layout, largest_row, n_arrays=len(t0.shapes) + len(jaxpr.outvars))
    source = _render(task, body, layout, target, space)
    return Proposal(
        name=f"rowwise-{target}",
        source=source,
        rationale=f"row-wise fusion over {layout.lead} leading axes ({'x'.join(map(str, layout.rows))} rows at scale {t0.scale}); "
        "one pass over HBM with whole rows in on-chip memory",
        template="rowwise",
    )


def _block_rows_space(target: str, layout: RowLayout, row_bytes: int, n_arrays: int) -> list[int]:
    nrows = math.prod(layout.rows)
    budget = _BUDGET[target]
    options = [b for b in (8, 16, 32, 64, 128, 256, 512, 1024, 2048) if b <= nrows and nrows % b == 0]
    fits = [b for b in options if 2 * n_arrays * b * row_bytes <= budget]
    if not fits:
        fits = options[:1] or [nrows]
    return fits[-4:]


_HEADER = {
    "tpu": "from jax.experimental.pallas import tpu as pltpu  # noqa: F401  (Mosaic TPU)\n",
    "gpu": "from jax.experimental.pallas import triton as pltriton\n",
    "cpu": "",
}


def _render(task: Task, body, layout: RowLayout, target: str, space: list[int]) -> str:
    n = len(layout.row_inputs)
    nout = len(body.outputs)
    args = ", ".join(f"a{i}" for i in range(n))
    statics = ", ".join(s.name for s in task.static)
    sig = args + (", " + statics if statics else "")
    lines = [
        f'"""mk offline author: row-wise Pallas kernel for {task.name} (target {target}).',
        "",
        "Whole rows per block; the reference's computation runs block-local inside one pallas_call.",
        '"""',
        "import functools",
        "import math",
        "",
        "import jax",
        "import jax.numpy as jnp",
        "from jax import lax",
        "from jax.experimental import pallas as pl",
        _HEADER[target].rstrip("\n"),
        "",
        f"LEAD = {layout.lead}",
        f"ROW_INPUTS = {layout.row_inputs!r}",
        f"CONFIG_SPACE = {{'block_rows': {space!r}}}",
        "",
        "",
        f"def _body({args}):",
        *[f"    {line}" for line in body.lines],
        f"    return ({', '.join(body.outputs)},)",
        "",
        "",
        "def _kernel(*refs, squeeze, scalar):",
        f"    ins, outs = refs[:{n}], refs[{n}:]",
        "    vals = []",
        "    for ref, row in zip(ins, ROW_INPUTS):",
        "        v = ref[...]",
        "        if row and squeeze[len(vals)]:",
        "            v = v[:, 0]",
        "        if not row and scalar[len(vals)]:",
        "            v = v.reshape(())",
        "        vals.append(v)",
        "    results = _body(*vals)",
        "    for ref, val in zip(outs, results):",
        "        val = val.reshape(val.shape + (1,)) if val.ndim == 1 and ref.ndim == 2 else val",
        "        ref[...] = jnp.broadcast_to(val, ref.shape).astype(ref.dtype)",
        "",
        "",
        f"def kernel({sig}, *, block_rows={space[-1]}):",
        f"    ins = [{args}]",
        "    rows = ins[[i for i, r in enumerate(ROW_INPUTS) if r][0]].shape[:LEAD]",
        "    nrows = math.prod(rows)",
        "    if nrows % block_rows:",
        "        block_rows = nrows",
        "    flat, specs = [], []",
        "    squeeze, scalar = [], []",
        "    for x, row in zip(ins, ROW_INPUTS):",
        "        if row:",
        "            tail = x.shape[LEAD:] or (1,)",
        "            squeeze.append(not x.shape[LEAD:])",
        "            scalar.append(False)",
        "            flat.append(x.reshape((nrows,) + tail))",
        "            specs.append(pl.BlockSpec((block_rows,) + tail, lambda i, k=len(tail): (i,) + (0,) * k))",
        "        else:",
        "            p = x.reshape((1, 1)) if x.ndim == 0 else x",
        "            squeeze.append(False)",
        "            scalar.append(x.ndim == 0)",
        "            flat.append(p)",
        "            specs.append(pl.BlockSpec(p.shape, lambda i, k=p.ndim: (0,) * k))",
        "    blocks = [jax.ShapeDtypeStruct((1,) + f.shape[1:] if r else f.shape, f.dtype) for f, r in zip(flat, ROW_INPUTS)]",
        "    blocks = [jax.ShapeDtypeStruct((), b.dtype) if s else (jax.ShapeDtypeStruct(b.shape[:1], b.dtype) if q else b)",
        "              for b, s, q in zip(blocks, scalar, squeeze)]",
        "    out_blocks = jax.eval_shape(_body, *blocks)",
        "    out_shapes = [jax.ShapeDtypeStruct((nrows,) + (o.shape[1:] or (1,)), o.dtype) for o in out_blocks]",
        "    out_specs = [pl.BlockSpec((block_rows,) + s.shape[1:], lambda i, k=len(s.shape) - 1: (i,) + (0,) * k) for s in out_shapes]",
        "    results = pl.pallas_call(",
        "        functools.partial(_kernel, squeeze=tuple(squeeze), scalar=tuple(scalar)),",
        "        grid=(nrows // block_rows,),",
        "        in_specs=specs,",
        "        out_specs=out_specs,",
        "        out_shape=out_shapes,",
        *(["        compiler_params=pltriton.CompilerParams(num_warps=4, num_stages=1),"] if target == "gpu" else []),
        "    )(*flat)",
        "    final = [r.reshape(rows + o.shape[1:]) for r, o in zip(results, out_blocks)]",
        f"    return final[0] if {nout} == 1 else tuple(final)",
        "",
    ]
    return "\n".join(lines)
