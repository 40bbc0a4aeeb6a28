"""Row-wise template: whole rows per block.

Applies when every output row depends only on the same row of the inputs
(norms, softmax, logsumexp, activations, long elementwise chains): the
reference's own computation, emitted block-local by :mod:`mk.author.emit`,
runs inside one ``pallas_call`` over blocks of ``block_rows`` rows, with
parameters (weights, biases) resident for every block.
"""

from __future__ import annotations

import math
import textwrap
from dataclasses import dataclass

import numpy as np

from mk.author.emit import MASKED_HELPER, Emitter, Unsupported
from mk.author.probe import arg_names, probes_for, signature
from mk.author.proposal import Proposal
from mk.author.trace import Traced
from mk.task import Task, np_dtype
from mk.targets import kernel_language

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
    jaxpr = t0.jaxpr.jaxpr
    if jaxpr.constvars:
        raise Unsupported("the reference closes over array constants")
    probes = probes_for(task, traced)
    names = arg_names(task)
    pad = kernel_language(target) == "triton"  # Triton blocks are powers of two: trailing axes are padded, reductions masked
    em = Emitter(layout.lead, probes, mask=pad, taken=set(names) | {v.name for v in probes.vars})
    for var, name, row in zip(jaxpr.invars, names, layout.row_inputs):
        em.bind(var, name, row)
    em.emit(jaxpr.eqns)
    body = em.result(jaxpr.outvars)
    if "dot_general" in body.primitives:
        raise Unsupported("a matrix product: use the matmul template")
    outs = [v.aval for v in jaxpr.outvars]
    row_bytes = sum(math.prod(s[layout.lead:]) * np_dtype(a.dtype).itemsize
                    for s, a, r in zip(t0.shapes, task.args, layout.row_inputs) if r)
    row_bytes += sum(math.prod(o.shape[layout.lead:]) * np.dtype(o.dtype).itemsize for o in outs)
    itemsizes = [np_dtype(a.dtype).itemsize for a, r in zip(task.args, layout.row_inputs) if r]
    itemsizes += [np.dtype(o.dtype).itemsize for o in outs]
    sublanes = 8 * max(1, 4 // min(itemsizes))
    space = _block_rows_space(target, layout, row_bytes, sublanes)
    source = _render(task, names, probes.used(*body.lines, *body.outputs), body, layout, target, space, sublanes)
    return Proposal(
        name=f"rowwise-{target}",
        source=source,
        rationale=f"row-wise fusion over {layout.lead} leading axes ({'x'.join(map(str, layout.rows))} rows at scale {t0.scale}); "
        "one pass over HBM with whole rows in on-chip memory"
        + ("; trailing axes padded to powers of two (Triton), padding masked out of every reduction" if pad else ""),
        template="rowwise",
    )


def _block_rows_space(target: str, layout: RowLayout, row_bytes: int, sublanes: int) -> list[int]:
    """Row-block sizes to tune over: those that fit the on-chip budget at the authoring size (the kernel fits each
    one to the rows it is called with, and to the budget, at trace time)."""
    nrows = math.prod(layout.rows)
    budget = _BUDGET[target]
    options = [b for b in (8, 16, 32, 64, 128, 256, 512, 1024, 2048) if b >= sublanes or kernel_language(target) == "triton"]
    fits = [b for b in options if 2 * b * row_bytes <= budget and b <= max(nrows, options[0])]
    return (fits or options[:1])[-4:]


_HEADER = {
    "tpu": "",
    "gpu": "from jax.experimental.pallas import triton as pltriton",
    "cpu": "",
}

_TPU_BLOCK = '''def _row_block(nrows, want, row_bytes):
    """Rows per block: the largest multiple of SUBLANES dividing nrows, at most want and within the on-chip budget;
    all the rows (one block, always a legal block shape) when no such multiple exists."""
    want = max(SUBLANES, min(want, BUDGET // max(1, 2 * row_bytes)))
    for b in range(min(want, nrows) // SUBLANES * SUBLANES, 0, -SUBLANES):
        if nrows % b == 0:
            return b
    return nrows
'''

_GPU_BLOCK = '''def _row_block(nrows, want, row_bytes):
    """Rows per block: the largest power of two (Triton's rule) dividing nrows, at most want and within budget."""
    want = max(1, min(want, BUDGET // max(1, 2 * row_bytes)))
    b = 1 << (want.bit_length() - 1)
    while nrows % b:
        b //= 2
    return b


def _pow2(n):
    return 1 << max(0, (n - 1).bit_length())


def _pad(x, first):
    """x zero-padded, along its axes from first on, to powers of two (the padding is masked in every reduction)."""
    widths = [(0, 0)] * first + [(0, _pow2(n) - n) for n in x.shape[first:]]
    return jnp.pad(x, widths) if any(w for _, w in widths) else x
'''


def _render(task: Task, names: list[str], used: list, body, layout: RowLayout, target: str, space: list[int],
            sublanes: int) -> str:
    nout = len(body.outputs)
    pad = kernel_language(target) == "triton"
    kwargs = ", ".join(v.name for v in used)
    bind = ", ".join(f"{v.name}={v.source}" for v in used)
    row_of = {n: r for n, r in zip(names, layout.row_inputs)}
    first_row = next(n for n in names if row_of[n])
    helpers = _GPU_BLOCK if pad else _TPU_BLOCK
    lines = [
        f'"""mk offline author: row-wise Pallas kernel for {task.name} (target {target}).',
        "",
        *textwrap.wrap("Whole rows per block; the reference's computation runs block-local inside one pallas_call. "
                       "Sizes and static values are read from the arguments at trace time; the row block is fitted "
                       "to the rows it is given." + (" Trailing axes are zero-padded to powers of two (Triton) and "
                                                     "the padding is masked out of every reduction." if pad else ""),
                       110),
        '"""',
        "import functools",
        "import math",
        "",
        "import jax",
        "import jax.numpy as jnp",
        "from jax import lax",
        "from jax.experimental import pallas as pl",
        *([_HEADER[target]] if _HEADER[target] else []),
        "",
        "#: leading axes that index rows (collapsed into one)",
        f"LEAD = {layout.lead}",
        "#: per input: tiled by rows (True) or resident in every block (a parameter)",
        f"ROW_INPUTS = {layout.row_inputs!r}",
        f"CONFIG_SPACE = {{'block_rows': {space!r}}}",
        *(["#: rows per sublane tile of the narrowest row dtype (8 for 32-bit, 16 for 16-bit)", f"SUBLANES = {sublanes}"]
          if not pad else []),
        "#: on-chip bytes the double-buffered blocks of one grid step may use",
        f"BUDGET = {_BUDGET[target]}",
        "",
        "",
        f"def _body({', '.join(names)}{', *, ' + kwargs if kwargs else ''}):",
        *[f"    {line}" for line in body.lines],
        f"    return ({', '.join(body.outputs)},)",
        "",
        "",
        *([*MASKED_HELPER.splitlines(), "", ""] if "_masked" in body.primitives else []),
        *helpers.splitlines(),
        "",
        "",
        "def _kernel(*refs, body, squeeze, scalar):",
        f"    ins, outs = refs[:{len(names)}], refs[{len(names)}:]",
        "    vals = []",
        "    for ref, row in zip(ins, ROW_INPUTS):",
        "        v = ref[...]",
        "        if row and squeeze[len(vals)]:",
        "            v = v[:, 0]",
        "        if not row and scalar[len(vals)]:",
        "            v = v.reshape(())",
        "        vals.append(v)",
        "    results = body(*vals)",
        "    for ref, val in zip(outs, results):",
        "        val = val.reshape(val.shape + (1,)) if val.ndim == 1 and ref.ndim == 2 else val",
        "        ref[...] = jnp.broadcast_to(val, ref.shape).astype(ref.dtype)",
        "",
        "",
        "def _block_structs(flat, squeeze, scalar):",
        "    \"\"\"What the body sees of each input in one block: a row value has one (collapsed) row.\"\"\"",
        "    blocks = [jax.ShapeDtypeStruct((1,) + f.shape[1:] if r else f.shape, f.dtype) for f, r in zip(flat, ROW_INPUTS)]",
        "    return [jax.ShapeDtypeStruct((), b.dtype) if s else (jax.ShapeDtypeStruct(b.shape[:1], b.dtype) if q else b)",
        "            for b, s, q in zip(blocks, scalar, squeeze)]",
        "",
        "",
        f"def kernel({signature(task, f'block_rows={space[-1]}')}):",
        *([f"    body = functools.partial(_body, {bind})"] if bind else ["    body = _body"]),
        f"    ins = [{', '.join(names)}]",
        f"    rows = {first_row}.shape[:LEAD]",
        "    nrows = math.prod(rows)",
        "    flat, squeeze, scalar = [], [], []",
        "    for arr, row in zip(ins, ROW_INPUTS):",
        "        if row:",
        "            flat.append(arr.reshape((nrows,) + (arr.shape[LEAD:] or (1,))))",
        "            squeeze.append(not arr.shape[LEAD:])",
        "            scalar.append(False)",
        "        else:",
        "            flat.append(arr.reshape((1, 1)) if arr.ndim == 0 else arr)",
        "            squeeze.append(False)",
        "            scalar.append(arr.ndim == 0)",
        "    out_real = jax.eval_shape(body, *_block_structs(flat, squeeze, scalar))",
        *(["    flat = [_pad(f, 1 if r else 0) for f, r in zip(flat, ROW_INPUTS)]"] if pad else []),
        "    out_blocks = jax.eval_shape(body, *_block_structs(flat, squeeze, scalar))",
        "    out_shapes = [jax.ShapeDtypeStruct((nrows,) + (o.shape[1:] or (1,)), o.dtype) for o in out_blocks]",
        "    row_bytes = sum(math.prod(f.shape[1:]) * f.dtype.itemsize for f, r in zip(flat, ROW_INPUTS) if r)",
        "    row_bytes += sum(math.prod(s.shape[1:]) * s.dtype.itemsize for s in out_shapes)",
        "    block_rows = _row_block(nrows, block_rows, row_bytes)",
        "    specs = [pl.BlockSpec((block_rows,) + f.shape[1:] if r else f.shape,",
        "                          (lambda i, k=f.ndim - 1: (i,) + (0,) * k) if r else (lambda i, k=f.ndim: (0,) * k))",
        "             for f, r in zip(flat, ROW_INPUTS)]",
        "    out_specs = [pl.BlockSpec((block_rows,) + s.shape[1:], lambda i, k=len(s.shape) - 1: (i,) + (0,) * k) for s in out_shapes]",
        "    results = pl.pallas_call(",
        "        functools.partial(_kernel, body=body, squeeze=tuple(squeeze), scalar=tuple(scalar)),",
        "        grid=(nrows // block_rows,),",
        "        in_specs=specs,",
        "        out_specs=out_specs,",
        "        out_shape=out_shapes,",
        *(["        compiler_params=pltriton.CompilerParams(num_warps=4, num_stages=1),"] if pad else []),
        "    )(*flat)",
        *(["    results = [r[(slice(None),) + tuple(slice(0, n) for n in (o.shape[1:] or (1,)))] for r, o in zip(results, out_real)]"]
          if pad else []),
        "    final = [r.reshape(rows + o.shape[1:]) for r, o in zip(results, out_real)]",
        "    return final[0]" if nout == 1 else "    return tuple(final)",
        "",
    ]
    return "\n".join(lines)
