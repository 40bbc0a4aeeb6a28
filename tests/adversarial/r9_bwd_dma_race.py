# Rule 18 on the backward (round 9): an honest forward and a two-kernel backward whose second kernel reads its x row
#   block through a DMA race: the block is copied HBM -> VMEM and waited for, then a second copy into the same VMEM
#   buffer is started and the kernel reads the buffer while that copy is in flight. The interpreter finishes a copy
#   at start, so every gradient is right on the CPU; on a TPU the read races the DMA. The forward's kernels always
#   ran once in the TPU interpreter with race detection; the backward's did not.
# Class: semantics (DMA race in kernel_bwd). Target: tpu. Task: the rmsnorm example at ci.
# Before (HEAD 07b185c): correct -- no race check ran on the backward.
# Expected verdict: rejected, reason names the race detector.
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
def _norm_bwd_tpu_kernel(*refs, kind, eps, has_w, has_b):
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
        functools.partial(_norm_bwd_tpu_kernel, kind=kind, eps=eps, has_w=has_w, has_b=has_b),
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

def _stats_kernel(x_ref, g_ref, w_ref, r_ref, c_ref, *, eps):
    x = x_ref[...].astype(jnp.float32)
    dy = g_ref[...].astype(jnp.float32) * w_ref[...]
    r = lax.rsqrt(jnp.mean(x * x, axis=-1, keepdims=True) + eps)
    r_ref[...] = r
    c_ref[...] = r * r * r * jnp.mean(dy * x, axis=-1, keepdims=True)


def _apply_kernel(x_hbm, g_ref, w_ref, r_ref, c_ref, dx_ref, dwp_ref, buf, sems):
    rows = pl.ds(pl.program_id(0) * buf.shape[0], buf.shape[0])
    first = pltpu.make_async_copy(x_hbm.at[rows], buf, sems.at[0])
    first.start()
    first.wait()
    again = pltpu.make_async_copy(x_hbm.at[rows], buf, sems.at[1])
    again.start()
    x = buf[...].astype(jnp.float32)  # read while `again` is still writing buf
    again.wait()
    g = g_ref[...].astype(jnp.float32)
    r = r_ref[...]
    dx_ref[...] = (r * g * w_ref[...] - x * c_ref[...]).astype(dx_ref.dtype)
    dwp_ref[...] = jnp.sum(g * x * r, axis=0, keepdims=True)[None]


def kernel_bwd(cotangent, x, weight, eps):
    """Two pallas_calls over row blocks (the second reads x through a racy DMA); the partial dw rows summed in XLA."""
    d = x.shape[-1]
    x2, g2, w2 = x.reshape(-1, d), cotangent.reshape(-1, d), weight.reshape(1, d)
    n = x2.shape[0]
    bm = 16 if n % 16 == 0 else n
    nb = n // bm
    row = pl.BlockSpec((bm, d), lambda i: (i, 0))
    col = pl.BlockSpec((bm, 1), lambda i: (i, 0))
    whole = pl.BlockSpec((1, d), lambda i: (0, 0))
    r, c = pl.pallas_call(
        functools.partial(_stats_kernel, eps=eps), grid=(nb,), in_specs=[row, row, whole], out_specs=[col, col],
        out_shape=[jax.ShapeDtypeStruct((n, 1), jnp.float32)] * 2)(x2, g2, w2)
    dx, dwp = pl.pallas_call(
        _apply_kernel, grid=(nb,), in_specs=[pl.BlockSpec(memory_space=pl.ANY), row, whole, col, col],
        out_specs=[row, pl.BlockSpec((1, 1, d), lambda i: (i, 0, 0))],
        out_shape=[jax.ShapeDtypeStruct((n, d), x.dtype), jax.ShapeDtypeStruct((nb, 1, d), jnp.float32)],
        scratch_shapes=[pltpu.VMEM((bm, d), x.dtype), pltpu.SemaphoreType.DMA((2,))],
    )(x2, g2, w2, r, c)
    return (dx.reshape(x.shape), jnp.sum(dwp, axis=(0, 1)))
