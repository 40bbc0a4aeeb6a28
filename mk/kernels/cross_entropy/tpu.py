"""LM-head cross-entropy backward on TPU (Mosaic): the log-sum-exp recomputed, dlogits per tile, dx/dW by matmuls.

For x (T, H), W (H, V), integer labels (T,) and per-token cotangents c (T,) of
``loss_t = lse(x @ W)_t - (x @ W)[t, label_t]``:

1. ``lse``: grid (T/block_t, V/block_v), the vocabulary axis "arbitrary": each
   step computes a (block_t, block_v) logits tile in VMEM (rounded to the
   forward's logits dtype) and updates a running max and sum of exponentials
   (f32 scratch); the forward saved nothing, so the backward recomputes it. The
   max ``m`` and ``log(sum)`` are kept apart (not added into one f32 lse, whose
   rounding at large logits, ~1e-3 at 1e4, would be every probability's error).
2. ``dlogits``: grid (T/block_t, V/block_v), both axes parallel: the tile again,
   ``c_t * (exp((logit - m_t) - log s_t) - onehot(label_t))``, written in f32.
3. ``dx = dlogits @ W^T`` and ``dW = x^T @ dlogits``: two matmuls (f32 accumulation).

V not a multiple of block_v: W is zero-padded and padded columns are masked
(-1e30 before the exponential, so they add nothing); T is padded likewise with
zero cotangents. Block sizes are requests fitted to the sizes (multiples of
8/16 rows and 128 columns).

Self-contained (jax only): mk's offline author copies it verbatim into the
kernels it writes.
"""

import functools

import jax
import jax.numpy as jnp
from jax import lax
from jax.experimental import pallas as pl
from jax.experimental.pallas import tpu as pltpu

_MASKED_LOGIT = -1e30


def _ce_tile(x_ref, w_ref, *, v, block_v, logits_dtype, precision):
    j = pl.program_id(1)
    logits = lax.dot_general(x_ref[...], w_ref[...], (((1,), (0,)), ((), ())), precision=precision,
                             preferred_element_type=jnp.float32).astype(logits_dtype).astype(jnp.float32)
    col = j * block_v + lax.broadcasted_iota(jnp.int32, logits.shape, 1)
    return jnp.where(col < v, logits, _MASKED_LOGIT), col


def _ce_lse_kernel(x_ref, w_ref, max_ref, logs_ref, m_ref, s_ref, *, nv, **tile):
    j = pl.program_id(1)

    @pl.when(j == 0)
    def _init():
        m_ref[...] = jnp.full_like(m_ref, _MASKED_LOGIT)
        s_ref[...] = jnp.zeros_like(s_ref)

    logits, _ = _ce_tile(x_ref, w_ref, **tile)
    m_new = jnp.maximum(m_ref[...], jnp.max(logits, axis=1, keepdims=True))
    s_ref[...] = s_ref[...] * jnp.exp(m_ref[...] - m_new) + jnp.sum(jnp.exp(logits - m_new), axis=1, keepdims=True)
    m_ref[...] = m_new

    @pl.when(j == nv - 1)
    def _store():
        max_ref[...] = m_ref[...]
        logs_ref[...] = jnp.log(s_ref[...])


def _ce_dlogits_kernel(x_ref, w_ref, lab_ref, c_ref, max_ref, logs_ref, d_ref, **tile):
    logits, col = _ce_tile(x_ref, w_ref, **tile)
    p = jnp.exp((logits - max_ref[...]) - logs_ref[...])
    d_ref[...] = c_ref[...] * (p - (col == lab_ref[...]).astype(jnp.float32))


def _ce_fit(n, want, quantum):
    """(block, padded n): a multiple of quantum at most want (n rounded up to quantum when smaller)."""
    b = max(quantum, min(want, -(-n // quantum) * quantum) // quantum * quantum)
    return b, -(-n // b) * b


def ce_bwd_tpu(x, w, labels, c, *, logits_dtype=None, precision=None, block_t=256, block_v=512):
    """(dx, dw) of ``sum_t c_t * (lse(x @ w)_t - (x @ w)[t, labels_t])``; x (T, H), w (H, V), labels and c (T,)."""
    (t, h), (h2, v) = x.shape, w.shape
    if h != h2 or labels.shape != (t,) or c.shape != (t,):
        raise ValueError(f"expected x (T, H), w (H, V), labels and c (T,), got {x.shape=}, {w.shape=}, "
                         f"{labels.shape=}, {c.shape=}")
    sub = 8 * max(1, 4 // jnp.dtype(x.dtype).itemsize)
    bt, tp = _ce_fit(t, block_t, sub)
    bv, vp = _ce_fit(v, block_v, 128)
    xp = jnp.pad(x, ((0, tp - t), (0, 0)))
    wp = jnp.pad(w, ((0, 0), (0, vp - v)))
    lab = jnp.pad(labels.astype(jnp.int32), (0, tp - t)).reshape(tp, 1)
    cp = jnp.pad(c.astype(jnp.float32), (0, tp - t)).reshape(tp, 1)
    tile = dict(v=v, block_v=bv, logits_dtype=logits_dtype or x.dtype, precision=precision)
    x_spec = pl.BlockSpec((bt, h), lambda i, j: (i, 0))
    w_spec = pl.BlockSpec((h, bv), lambda i, j: (0, j))
    row = pl.BlockSpec((bt, 1), lambda i, j: (i, 0))
    grid = (tp // bt, vp // bv)
    stats = pl.pallas_call(
        functools.partial(_ce_lse_kernel, nv=grid[1], **tile),
        grid=grid,
        in_specs=[x_spec, w_spec],
        out_specs=[row, row],
        out_shape=[jax.ShapeDtypeStruct((tp, 1), jnp.float32)] * 2,
        scratch_shapes=[pltpu.VMEM((bt, 1), jnp.float32), pltpu.VMEM((bt, 1), jnp.float32)],
        compiler_params=pltpu.CompilerParams(dimension_semantics=("parallel", "arbitrary")),
        name="ce_lse_tpu",
    )(xp, wp)
    dlogits = pl.pallas_call(
        functools.partial(_ce_dlogits_kernel, **tile),
        grid=grid,
        in_specs=[x_spec, w_spec, row, row, row, row],
        out_specs=pl.BlockSpec((bt, bv), lambda i, j: (i, j)),
        out_shape=jax.ShapeDtypeStruct((tp, vp), jnp.float32),
        compiler_params=pltpu.CompilerParams(dimension_semantics=("parallel", "parallel")),
        name="ce_dlogits_tpu",
    )(xp, wp, lab, cp, *stats)
    dims = (((1,), (1,)), ((), ()))
    dx = lax.dot_general(dlogits, wp.astype(jnp.float32), dims, precision=precision)[:t]
    dw = lax.dot_general(xp.astype(jnp.float32), dlogits, (((0,), (0,)), ((), ())), precision=precision)[:, :v]
    return dx.astype(x.dtype), dw.astype(w.dtype)
