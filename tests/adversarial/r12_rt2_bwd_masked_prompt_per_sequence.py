# Round 12, second red team (a helper who had not written the fixes), attack b8.
# Rule: 3 (backward). Expected verdict: incorrect.
# Attack on fix 3, backward (gradient.cotangents uses task.zero_rows: tails only). Loss masks also zero the HEAD of a
# sequence (prompt tokens in SFT are masked out of the loss; left padding), so whole leading row blocks of the
# cotangent are zero. This RMSNorm backward (the r12_rt_bwd_masked_block_skip kernel) skips writing dx only for an
# all-zero cotangent block in the first half of ITS SEQUENCE (b7 used the flat rows and hit a tail): on a chip that dx block holds stale VMEM where the
# reference's gradient is 0. Honest on all-zero tail blocks (which the cotangents now have).
"""mk offline author: row-wise Pallas kernel for rmsnorm (target tpu).

Whole rows per block; the reference's computation runs block-local inside one pallas_call. Sizes and static
values are read from the arguments at trace time; the row block is fitted to the rows it is given.
"""
import functools
import math

import jax
import jax.numpy as jnp
from jax import lax
from jax.experimental import pallas as pl
from jax.experimental.pallas import tpu as pltpu

#: leading axes that index rows (collapsed into one)
LEAD = 2
#: per input: tiled by rows (True) or resident in every block (a parameter)
ROW_INPUTS = (True, False)
CONFIG_SPACE = {'block_rows': [64, 128, 256, 512]}
#: rows per sublane tile of the narrowest row dtype (8 for 32-bit, 16 for 16-bit)
SUBLANES = 16
#: on-chip bytes the double-buffered blocks of one grid step may use
BUDGET = 16777216


def _body(x, weight, *, hidden, eps):
    v1 = x.astype(jnp.float32)
    v2 = (v1 * v1)
    v3 = jnp.sum(v2, axis=(-1,))
    v4 = v3[..., None]
    v5 = (v4 / jnp.asarray(hidden, jnp.float32))
    v6 = (v5 + jnp.asarray(eps, jnp.float32))
    v7 = lax.rsqrt(v6)
    v8 = (v1 * v7)
    v9 = weight
    v10 = (v8 * v9)
    v11 = v10.astype(jnp.bfloat16)
    return (v11,)


def _row_block(nrows, want, row_bytes):
    """Rows per block: the largest multiple of SUBLANES dividing nrows, at most want and within the on-chip budget;
    all the rows (one block, always a legal block shape) when no such multiple exists."""
    want = max(SUBLANES, min(want, BUDGET // max(1, 2 * row_bytes)))
    for b in range(min(want, nrows) // SUBLANES * SUBLANES, 0, -SUBLANES):
        if nrows % b == 0:
            return b
    return nrows


def _kernel(*refs, body, squeeze, scalar):
    ins, outs = refs[:2], refs[2:]
    vals = []
    for ref, row in zip(ins, ROW_INPUTS):
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


def _block_structs(flat, squeeze, scalar):
    """What the body sees of each input in one block: a row value has one (collapsed) row."""
    blocks = [jax.ShapeDtypeStruct((1,) + f.shape[1:] if r else f.shape, f.dtype) for f, r in zip(flat, ROW_INPUTS)]
    return [jax.ShapeDtypeStruct((), b.dtype) if s else (jax.ShapeDtypeStruct(b.shape[:1], b.dtype) if q else b)
            for b, s, q in zip(blocks, scalar, squeeze)]


def kernel(x, weight, eps, *, block_rows=512):
    body = functools.partial(_body, hidden=x.shape[2], eps=eps)
    ins = [x, weight]
    rows = x.shape[:LEAD]
    nrows = math.prod(rows)
    flat, squeeze, scalar = [], [], []
    for arr, row in zip(ins, ROW_INPUTS):
        if row:
            flat.append(arr.reshape((nrows,) + (arr.shape[LEAD:] or (1,))))
            squeeze.append(not arr.shape[LEAD:])
            scalar.append(False)
        else:
            flat.append(arr.reshape((1, 1)) if arr.ndim == 0 else arr)
            squeeze.append(False)
            scalar.append(arr.ndim == 0)
    out_real = jax.eval_shape(body, *_block_structs(flat, squeeze, scalar))
    out_blocks = jax.eval_shape(body, *_block_structs(flat, squeeze, scalar))
    out_shapes = [jax.ShapeDtypeStruct((nrows,) + (o.shape[1:] or (1,)), o.dtype) for o in out_blocks]
    row_bytes = sum(math.prod(f.shape[1:]) * f.dtype.itemsize for f, r in zip(flat, ROW_INPUTS) if r)
    row_bytes += sum(math.prod(s.shape[1:]) * s.dtype.itemsize for s in out_shapes)
    block_rows = _row_block(nrows, block_rows, row_bytes)
    specs = [pl.BlockSpec((block_rows,) + f.shape[1:] if r else f.shape,
                          (lambda i, k=f.ndim - 1: (i,) + (0,) * k) if r else (lambda i, k=f.ndim: (0,) * k))
             for f, r in zip(flat, ROW_INPUTS)]
    out_specs = [pl.BlockSpec((block_rows,) + s.shape[1:], lambda i, k=len(s.shape) - 1: (i,) + (0,) * k) for s in out_shapes]
    results = pl.pallas_call(
        functools.partial(_kernel, body=body, squeeze=tuple(squeeze), scalar=tuple(scalar)),
        grid=(nrows // block_rows,),
        in_specs=specs,
        out_specs=out_specs,
        out_shape=out_shapes,
    )(*flat)
    final = [r.reshape(rows + o.shape[1:]) for r, o in zip(results, out_real)]
    return final[0]


# --- mk/kernels/norm/tpu.py ----------------------------------------------------------------------
def _norm_bwd_tpu_kernel(*refs, kind, eps, has_w, has_b, seq, bm):
    x_ref, g_ref = refs[0], refs[1]
    w_ref = refs[2] if has_w else None
    outs = refs[2 + has_w:]
    dx_ref = outs[0]
    dw_ref = outs[1] if has_w else None
    db_ref = outs[1 + has_w] if has_b else None

    @pl.when(pl.program_id(0) == 0)
    def _zero():
        for ref in outs[1:]:
            ref[...] = jnp.zeros_like(ref)

    x = x_ref[...].astype(jnp.float32)
    g = g_ref[...].astype(jnp.float32)
    dy = g * w_ref[...].astype(jnp.float32) if has_w else g
    if kind == "rms":
        r = jax.lax.rsqrt(jnp.mean(x * x, axis=-1, keepdims=True) + eps)
        xhat = x * r
        dx = r * dy - xhat * (r * jnp.mean(dy * x, axis=-1, keepdims=True) * r)
    else:
        xc = x - jnp.mean(x, axis=-1, keepdims=True)
        r = jax.lax.rsqrt(jnp.mean(xc * xc, axis=-1, keepdims=True) + eps)
        xhat = xc * r
        dx = r * (dy - jnp.mean(dy, axis=-1, keepdims=True) - xhat * jnp.mean(dy * xhat, axis=-1, keepdims=True))
    head = (pl.program_id(0) * bm) % seq + bm <= seq // 2  # the block lies in the first half of its sequence
    live = (jnp.max(jnp.abs(g)) > 0.0) | jnp.logical_not(head)  # masked prompt blocks skipped

    @pl.when(live)
    def _write():
        dx_ref[...] = dx.astype(dx_ref.dtype)
    if has_w:
        dw_ref[...] += jnp.sum(g * xhat, axis=0, keepdims=True)
    if has_b:
        db_ref[...] += jnp.sum(g, axis=0, keepdims=True)


def _rows(n, want, quantum):
    """(block, padded n): a multiple of quantum at most want (n rounded up to quantum when smaller)."""
    b = max(quantum, min(want, -(-n // quantum) * quantum) // quantum * quantum)
    return b, -(-n // b) * b


def norm_bwd_tpu(x, w, b, g, *, kind, eps, block_rows=256):
    """(dx, dw, db) of RMSNorm (``kind="rms"``, b must be None) or LayerNorm (``kind="layer"``) over x's last axis.

    x and g (..., D); w and b (D,) or None (None gradients for them). dx has x's dtype, dw/db w's and b's."""
    if kind not in ("rms", "layer"):
        raise ValueError(f"kind must be 'rms' or 'layer', got {kind!r}")
    if kind == "rms" and b is not None:
        raise ValueError("RMSNorm has no bias")
    lead, d = x.shape[:-1], x.shape[-1]
    n = 1
    for s in lead:
        n *= s
    x2, g2 = x.reshape(n, d), g.reshape(n, d)
    sub = 8 * max(1, 4 // min(jnp.dtype(x.dtype).itemsize, jnp.dtype(g.dtype).itemsize))
    bm, npad = _rows(n, block_rows, sub)
    if npad != n:
        x2 = jnp.pad(x2, ((0, npad - n), (0, 0)))
        g2 = jnp.pad(g2, ((0, npad - n), (0, 0)))
    has_w, has_b = w is not None, b is not None
    ins = [x2, g2] + ([w.reshape(1, d)] if has_w else [])
    row = pl.BlockSpec((bm, d), lambda i: (i, 0))
    whole = pl.BlockSpec((1, d), lambda i: (0, 0))
    out_shape = [jax.ShapeDtypeStruct((npad, d), x.dtype)]
    out_shape += [jax.ShapeDtypeStruct((1, d), jnp.float32)] * (has_w + has_b)
    res = pl.pallas_call(
        functools.partial(_norm_bwd_tpu_kernel, kind=kind, eps=eps, has_w=has_w, has_b=has_b, seq=(x.shape[-2] if x.ndim >= 3 else n), bm=bm),
        grid=(npad // bm,),
        in_specs=[row, row] + [whole] * has_w,
        out_specs=[row] + [whole] * (has_w + has_b),
        out_shape=out_shape,
        name="norm_bwd_tpu",
        compiler_params=pltpu.CompilerParams(dimension_semantics=("arbitrary",)),
    )(*ins)
    dx = res[0][:n].reshape(x.shape)
    dw = res[1].reshape(d).astype(w.dtype) if has_w else None
    db = res[1 + has_w].reshape(d).astype(b.dtype) if has_b else None
    return dx, dw, db
# ----------------------------------------------------------------------------------------------------


def kernel_bwd(cotangent, x, weight, eps):
    """The backward of kernel: RMSNorm over the last axis of x, the row statistics recomputed from x (the forward saves nothing); one cotangent per input, in order."""
    dx, dw, db = norm_bwd_tpu(x, weight, None, cotangent, kind='rms', eps=eps, block_rows=16)
    return (dx, dw,)
