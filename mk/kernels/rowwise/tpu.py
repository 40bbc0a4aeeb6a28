"""Whole rows per block on TPU (Mosaic): a row-local body (the task's own computation) run over blocks of rows.

:func:`rowwise_tpu` collapses the ``lead`` leading axes of the row inputs into
one row axis, tiles them by ``block_rows`` rows (the largest multiple of the
sublane tile dividing the rows and fitting the on-chip budget; all the rows
when none does, always a legal block), keeps the other inputs (weights, biases,
scalars) resident in every block, and runs ``body`` on each block inside one
``pallas_call``. ``body`` takes one value per input, in order (a block of rows
``(block_rows, ...)`` for a row input whose rows have trailing axes,
``(block_rows,)`` for one without, the whole array for a parameter, a scalar
for a 0-d one) and returns a tuple of row-block results; each output has the
rows' leading shape followed by its block's trailing axes.

Self-contained (jax only): mk's offline author copies it verbatim into the
kernels it writes, after the body it generates.
"""

import functools
import math

import jax
import jax.numpy as jnp
from jax.experimental import pallas as pl


def _rw_block(nrows, want, row_bytes, sublanes, budget):
    """Rows per block: the largest multiple of sublanes dividing nrows, at most want and within the on-chip budget;
    all the rows (one block, always a legal block shape) when no such multiple exists."""
    want = max(sublanes, min(want, budget // max(1, 2 * row_bytes)))
    for b in range(min(want, nrows) // sublanes * sublanes, 0, -sublanes):
        if nrows % b == 0:
            return b
    return nrows


def _rw_kernel(*refs, body, n_in, row_inputs, squeeze, scalar):
    ins, outs = refs[:n_in], refs[n_in:]
    vals = []
    for ref, row in zip(ins, row_inputs):
        v = ref[...]
        if row and squeeze[len(vals)]:
            v = v[:, 0]
        if not row and scalar[len(vals)]:
            v = v.reshape(())
        vals.append(v)
    results = body(*vals)
    for ref, val in zip(outs, results):
        val = val.reshape(val.shape + (1,)) if val.ndim == 1 and ref.ndim == 2 else val
        ref[...] = jnp.broadcast_to(val, ref.shape).astype(ref.dtype)


def _rw_flatten(inputs, row_inputs, lead):
    """(rows, flat inputs, squeeze, scalar): row inputs as (nrows, trailing...) (a (nrows, 1) column when they have
    no trailing axes), 0-d parameters as (1, 1)."""
    rows = next(a for a, r in zip(inputs, row_inputs) if r).shape[:lead]
    nrows = math.prod(rows)
    flat, squeeze, scalar = [], [], []
    for arr, row in zip(inputs, row_inputs):
        if row:
            flat.append(arr.reshape((nrows,) + (arr.shape[lead:] or (1,))))
            squeeze.append(not arr.shape[lead:])
            scalar.append(False)
        else:
            flat.append(arr.reshape((1, 1)) if arr.ndim == 0 else arr)
            squeeze.append(False)
            scalar.append(arr.ndim == 0)
    return rows, flat, squeeze, scalar


def _rw_block_structs(flat, row_inputs, squeeze, scalar):
    """What the body sees of each input in one block: a row value has one (collapsed) row."""
    blocks = [jax.ShapeDtypeStruct((1,) + f.shape[1:] if r else f.shape, f.dtype) for f, r in zip(flat, row_inputs)]
    return [jax.ShapeDtypeStruct((), b.dtype) if s else (jax.ShapeDtypeStruct(b.shape[:1], b.dtype) if q else b)
            for b, s, q in zip(blocks, scalar, squeeze)]


def rowwise_tpu(body, inputs, *, row_inputs, lead, block_rows=512, sublanes=8, budget=16 * 2**20):
    """``body`` run block-local over blocks of whole rows; the list of its outputs, each shaped rows + trailing.

    ``row_inputs``: per input, tiled by rows (True) or resident in every block (False); ``lead``: the leading axes
    that index rows; ``sublanes``: the row quantum of the narrowest row dtype (8 for 32-bit, 16 for 16-bit);
    ``budget``: on-chip bytes the double-buffered blocks of one step may use."""
    if len(inputs) != len(row_inputs) or not any(row_inputs):
        raise ValueError(f"expected one row_inputs flag per input and at least one row input, got {row_inputs!r} "
                         f"for {len(inputs)} inputs")
    rows, flat, squeeze, scalar = _rw_flatten(inputs, row_inputs, lead)
    nrows = math.prod(rows)
    out_blocks = jax.eval_shape(body, *_rw_block_structs(flat, row_inputs, squeeze, scalar))
    out_shapes = [jax.ShapeDtypeStruct((nrows,) + (o.shape[1:] or (1,)), o.dtype) for o in out_blocks]
    row_bytes = sum(math.prod(f.shape[1:]) * f.dtype.itemsize for f, r in zip(flat, row_inputs) if r)
    row_bytes += sum(math.prod(s.shape[1:]) * s.dtype.itemsize for s in out_shapes)
    block_rows = _rw_block(nrows, block_rows, row_bytes, sublanes, budget)
    specs = [pl.BlockSpec((block_rows,) + f.shape[1:] if r else f.shape,
                          (lambda i, k=f.ndim - 1: (i,) + (0,) * k) if r else (lambda i, k=f.ndim: (0,) * k))
             for f, r in zip(flat, row_inputs)]
    out_specs = [pl.BlockSpec((block_rows,) + s.shape[1:], lambda i, k=len(s.shape) - 1: (i,) + (0,) * k)
                 for s in out_shapes]
    results = pl.pallas_call(
        functools.partial(_rw_kernel, body=body, n_in=len(flat), row_inputs=tuple(row_inputs),
                          squeeze=tuple(squeeze), scalar=tuple(scalar)),
        grid=(nrows // block_rows,),
        in_specs=specs,
        out_specs=out_specs,
        out_shape=out_shapes,
    )(*flat)
    return [r.reshape(rows + o.shape[1:]) for r, o in zip(results, out_blocks)]
