"""Whole rows per block on GPU (Pallas Triton): a row-local body (the task's own computation) run over blocks of rows.

The same contract as :mod:`mk.kernels.rowwise.tpu` (see :func:`rowwise_gpu`).
Triton blocks are powers of two: the row block is the largest power of two
dividing the rows (within the on-chip budget), and every input's trailing axes
are zero-padded to powers of two; the body must mask the padding out of its
reductions (mk's offline author emits it so, with ``_masked``), and the
outputs are sliced back to their true trailing sizes. A block's values live in
registers (there is no matrix product to stage in shared memory), so the row
block and ``num_warps`` are requests fitted at trace time to the padded row
width (``_rw_fit``): more warps first, then fewer rows, until about
``per_thread`` elements of the widest row value a thread (an 8192-wide bf16
RMSNorm block of 4 rows at 4 warps held 256 a thread: 255 registers, spills).

Self-contained (jax only): mk's offline author copies it verbatim into the
kernels it writes, after the body it generates.
"""

import functools
import math

import jax
import jax.numpy as jnp
from jax.experimental import pallas as pl
from jax.experimental.pallas import triton as pltriton


def _rw_block(nrows, want, row_bytes, budget):
    """Rows per block: the largest power of two (Triton's rule) dividing nrows, at most want and within budget."""
    want = max(1, min(want, budget // max(1, 2 * row_bytes)))
    b = 1 << (want.bit_length() - 1)
    while nrows % b:
        b //= 2
    return b


def _rw_fit(block_rows, num_warps, row_elems, param_elems, per_thread=32):
    """(rows, warps): ``num_warps`` raised (up to 8) and then ``block_rows`` halved (down to 1), then warps raised
    to 16, until a block's widest values (``block_rows`` rows of ``row_elems`` padded elements, and a parameter of
    ``param_elems``) come to at most ``per_thread`` elements a thread; halved rows still divide the rows."""
    def over(rows, warps):
        return max(rows * row_elems, param_elems) > per_thread * 32 * warps

    while over(block_rows, num_warps):
        if num_warps < 8:
            num_warps *= 2
        elif block_rows > 1:
            block_rows //= 2
        elif num_warps < 16:
            num_warps *= 2
        else:
            break
    return block_rows, num_warps


def _rw_pow2(n):
    return 1 << max(0, (n - 1).bit_length())


def _rw_pad(x, first):
    """x zero-padded, along its axes from first on, to powers of two (the padding is masked in every reduction)."""
    widths = [(0, 0)] * first + [(0, _rw_pow2(n) - n) for n in x.shape[first:]]
    return jnp.pad(x, widths) if any(w for _, w in widths) else x


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


def rowwise_gpu(body, inputs, *, row_inputs, lead, block_rows=64, budget=96 * 2**10 * 4, num_warps=4):
    """``body`` run block-local over blocks of whole rows (trailing axes padded to powers of two, the outputs sliced
    back); the list of its outputs, each shaped rows + trailing. ``row_inputs``, ``lead`` and ``budget`` as in
    :func:`rowwise_tpu`; ``block_rows`` and ``num_warps`` are requests fitted to the row width (``_rw_fit``)."""
    if len(inputs) != len(row_inputs) or not any(row_inputs):
        raise ValueError(f"expected one row_inputs flag per input and at least one row input, got {row_inputs!r} "
                         f"for {len(inputs)} inputs")
    rows, flat, squeeze, scalar = _rw_flatten(inputs, row_inputs, lead)
    nrows = math.prod(rows)
    out_real = jax.eval_shape(body, *_rw_block_structs(flat, row_inputs, squeeze, scalar))
    flat = [_rw_pad(f, 1 if r else 0) for f, r in zip(flat, row_inputs)]
    out_blocks = jax.eval_shape(body, *_rw_block_structs(flat, row_inputs, squeeze, scalar))
    out_shapes = [jax.ShapeDtypeStruct((nrows,) + (o.shape[1:] or (1,)), o.dtype) for o in out_blocks]
    row_bytes = sum(math.prod(f.shape[1:]) * f.dtype.itemsize for f, r in zip(flat, row_inputs) if r)
    row_bytes += sum(math.prod(s.shape[1:]) * s.dtype.itemsize for s in out_shapes)
    block_rows = _rw_block(nrows, block_rows, row_bytes, budget)
    row_elems = max([math.prod(f.shape[1:]) for f, r in zip(flat, row_inputs) if r]
                    + [math.prod(s.shape[1:]) for s in out_shapes])
    param_elems = max([math.prod(f.shape) for f, r in zip(flat, row_inputs) if not r] or [1])
    block_rows, num_warps = _rw_fit(block_rows, num_warps, row_elems, param_elems)
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
        compiler_params=pltriton.CompilerParams(num_warps=num_warps, num_stages=1),
    )(*flat)
    results = [r[(slice(None),) + tuple(slice(0, n) for n in (o.shape[1:] or (1,)))] for r, o in zip(results, out_real)]
    return [r.reshape(rows + o.shape[1:]) for r, o in zip(results, out_real)]
