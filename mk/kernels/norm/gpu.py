"""RMSNorm and LayerNorm backward on GPU (Pallas Triton): dx row-wise, per-block weight/bias partials reduced after.

The same math as :mod:`mk.kernels.norm.tpu`. One program per block of
``block_rows`` rows recomputes the row statistics in f32 from x, writes that
block's dx and its own (1, D) partial ``sum(g * xhat)`` (and ``sum(g)``); the
partials (one row per program: Triton runs programs concurrently, so they never
share an output block) are summed over blocks afterwards. D is zero-padded to a
power of two (Triton's rule) and the padding is masked out of every row
statistic; rows are zero-padded to a multiple of the block (a zero cotangent
row adds nothing).

Self-contained (jax only): mk's offline author copies it verbatim into the
kernels it writes.
"""

import functools

import jax
import jax.numpy as jnp
from jax.experimental import pallas as pl
from jax.experimental.pallas import triton as pltriton


def _pow2(n):
    return 1 << max(0, (n - 1).bit_length())


def _norm_bwd_gpu_kernel(*refs, kind, eps, d, has_w, has_b):
    x_ref, g_ref = refs[0], refs[1]
    w_ref = refs[2] if has_w else None
    outs = refs[2 + has_w:]
    dx_ref = outs[0]
    x = x_ref[...].astype(jnp.float32)
    g = g_ref[...].astype(jnp.float32)
    dy = g * w_ref[...].astype(jnp.float32) if has_w else g
    live = jax.lax.broadcasted_iota(jnp.int32, x.shape, 1) < d
    inv_d = 1.0 / d
    if kind == "rms":
        r = jax.lax.rsqrt(jnp.sum(x * x, axis=-1, keepdims=True) * inv_d + eps)
        xhat = x * r
        dx = r * dy - xhat * (r * jnp.sum(dy * x, axis=-1, keepdims=True) * inv_d * r)
    else:
        xc = jnp.where(live, x - jnp.sum(x, axis=-1, keepdims=True) * inv_d, 0.0)
        r = jax.lax.rsqrt(jnp.sum(xc * xc, axis=-1, keepdims=True) * inv_d + eps)
        xhat = xc * r
        dx = r * (dy - jnp.sum(dy, axis=-1, keepdims=True) * inv_d
                  - xhat * (jnp.sum(dy * xhat, axis=-1, keepdims=True) * inv_d))
    dx_ref[...] = jnp.where(live, dx, 0.0).astype(dx_ref.dtype)
    if has_w:
        outs[1][...] = jnp.sum(g * xhat, axis=0, keepdims=True)
    if has_b:
        outs[1 + has_w][...] = jnp.sum(g, axis=0, keepdims=True)


def norm_bwd_gpu(x, w, b, g, *, kind, eps, block_rows=16, num_warps=4):
    """(dx, dw, db) of RMSNorm (``kind="rms"``, b None) or LayerNorm (``kind="layer"``) over x's last axis; w/b
    (D,) or None."""
    if kind not in ("rms", "layer"):
        raise ValueError(f"kind must be 'rms' or 'layer', got {kind!r}")
    if kind == "rms" and b is not None:
        raise ValueError("RMSNorm has no bias")
    lead, d = x.shape[:-1], x.shape[-1]
    n = 1
    for s in lead:
        n *= s
    dp = _pow2(d)
    bm = max(1, min(_pow2(block_rows), _pow2(n)))
    npad = -(-n // bm) * bm
    x2 = jnp.pad(x.reshape(n, d), ((0, npad - n), (0, dp - d)))
    g2 = jnp.pad(g.reshape(n, d), ((0, npad - n), (0, dp - d)))
    has_w, has_b = w is not None, b is not None
    ins = [x2, g2] + ([jnp.pad(w.reshape(1, d), ((0, 0), (0, dp - d)))] if has_w else [])
    nb = npad // bm
    row = pl.BlockSpec((bm, dp), lambda i: (i, 0))
    part = pl.BlockSpec((1, dp), lambda i: (i, 0))
    out_shape = [jax.ShapeDtypeStruct((npad, dp), x.dtype)]
    out_shape += [jax.ShapeDtypeStruct((nb, dp), jnp.float32)] * (has_w + has_b)
    res = pl.pallas_call(
        functools.partial(_norm_bwd_gpu_kernel, kind=kind, eps=eps, d=d, has_w=has_w, has_b=has_b),
        grid=(nb,),
        in_specs=[row, row] + [pl.BlockSpec((1, dp), lambda i: (0, 0))] * has_w,
        out_specs=[row] + [part] * (has_w + has_b),
        out_shape=out_shape,
        name="norm_bwd_gpu",
        compiler_params=pltriton.CompilerParams(num_warps=num_warps, num_stages=1),
    )(*ins)
    dx = res[0][:n, :d].reshape(x.shape)
    dw = jnp.sum(res[1][:, :d], axis=0).astype(w.dtype) if has_w else None
    db = jnp.sum(res[1 + has_w][:, :d], axis=0).astype(b.dtype) if has_b else None
    return dx, dw, db
