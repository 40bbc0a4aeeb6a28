"""RMSNorm and LayerNorm backward on TPU (Mosaic): dx row-wise, the weight/bias gradients reduced over rows.

For x (N, D) and the output cotangent g (N, D), one grid step takes a block of
``block_rows`` whole rows, recomputes the row statistics in f32 from x (the
forward saves nothing but its inputs), writes that block's dx and adds the
block's ``sum(g * xhat)`` (and ``sum(g)``) into an f32 (1, D) accumulator that
stays in VMEM across the grid (the row axis is "arbitrary": a reduction).

RMSNorm, r = rsqrt(mean(x^2) + eps), dy = g * w:
    dx = r * dy - x * r^3 * mean(dy * x),    dw = sum_rows(g * x * r).
LayerNorm, xhat = (x - mean(x)) * r, dy = g * w:
    dx = r * (dy - mean(dy) - xhat * mean(dy * xhat)),   dw = sum_rows(g * xhat),   db = sum_rows(g).

Rows the block does not divide are zero-padded (a zero cotangent row adds
nothing to either gradient and its dx is sliced off).

Self-contained (jax only): mk's offline author copies it verbatim into the
kernels it writes.
"""

import functools

import jax
import jax.numpy as jnp
from jax.experimental import pallas as pl
from jax.experimental.pallas import tpu as pltpu


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
