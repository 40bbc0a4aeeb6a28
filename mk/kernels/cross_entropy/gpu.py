"""LM-head cross-entropy backward on GPU (Pallas Triton): the log-sum-exp recomputed, dlogits per tile, dx/dW by
matmuls.

The same computation as :mod:`mk.kernels.cross_entropy.tpu`. ``lse``: one
program per token block loops (``lax.fori_loop`` over ``pl.ds`` slices of W)
over vocabulary blocks with a running max and sum of exponentials in
registers. ``dlogits``: one program per (token block, vocabulary block) tile.
Then ``dx = dlogits @ W^T`` and ``dW = x^T @ dlogits``. T, H and V are
zero-padded to power-of-two blocks (Triton's rule, at least 16 for its dots);
padded vocabulary columns are masked, padded tokens carry a zero cotangent,
padded hidden columns contribute zero.

Self-contained (jax only): mk's offline author copies it verbatim into the
kernels it writes.
"""

import functools

import jax
import jax.numpy as jnp
from jax import lax
from jax.experimental import pallas as pl
from jax.experimental.pallas import triton as pltriton

_MASKED_LOGIT = -1e30


def _ce_pow2(n):
    return 1 << max(0, (n - 1).bit_length())


def _ce_logits(x, w, col, v, logits_dtype):
    logits = jnp.dot(x, w, preferred_element_type=jnp.float32).astype(logits_dtype).astype(jnp.float32)
    return jnp.where(col < v, logits, _MASKED_LOGIT)


def _ce_lse_gpu_kernel(x_ref, w_ref, max_ref, logs_ref, *, v, block_v, nv, logits_dtype):
    x = x_ref[...]
    bt = x.shape[0]

    def step(j, carry):
        m, s = carry
        col = j * block_v + lax.broadcasted_iota(jnp.int32, (bt, block_v), 1)
        logits = _ce_logits(x, w_ref[:, pl.ds(j * block_v, block_v)], col, v, logits_dtype)
        m_new = jnp.maximum(m, jnp.max(logits, axis=1))
        s = s * jnp.exp(m - m_new) + jnp.sum(jnp.exp(logits - m_new[:, None]), axis=1)
        return m_new, s

    m, s = lax.fori_loop(0, nv, step, (jnp.full((bt,), _MASKED_LOGIT, jnp.float32), jnp.zeros((bt,), jnp.float32)))
    max_ref[...] = m
    logs_ref[...] = jnp.log(s)


def _ce_dlogits_gpu_kernel(x_ref, w_ref, lab_ref, c_ref, max_ref, logs_ref, d_ref, *, v, block_v, logits_dtype):
    x = x_ref[...]
    col = pl.program_id(1) * block_v + lax.broadcasted_iota(jnp.int32, (x.shape[0], block_v), 1)
    logits = _ce_logits(x, w_ref[...], col, v, logits_dtype)
    p = jnp.exp((logits - max_ref[...][:, None]) - logs_ref[...][:, None])
    d_ref[...] = c_ref[...][:, None] * (p - (col == lab_ref[...][:, None]).astype(jnp.float32))


def ce_bwd_gpu(x, w, labels, c, *, logits_dtype=None, precision=None, block_t=32, block_v=64, num_warps=4):
    """(dx, dw) of ``sum_t c_t * (lse(x @ w)_t - (x @ w)[t, labels_t])``; x (T, H), w (H, V), labels and c (T,)."""
    (t, h), (h2, v) = x.shape, w.shape
    if h != h2 or labels.shape != (t,) or c.shape != (t,):
        raise ValueError(f"expected x (T, H), w (H, V), labels and c (T,), got {x.shape=}, {w.shape=}, "
                         f"{labels.shape=}, {c.shape=}")
    bt = max(16, min(_ce_pow2(block_t), _ce_pow2(t)))
    bv = max(16, min(_ce_pow2(block_v), _ce_pow2(v)))
    tp, vp, hp = -(-t // bt) * bt, -(-v // bv) * bv, max(16, _ce_pow2(h))
    xp = jnp.pad(x, ((0, tp - t), (0, hp - h)))
    wp = jnp.pad(w, ((0, hp - h), (0, vp - v)))
    lab = jnp.pad(labels.astype(jnp.int32), (0, tp - t))
    cp = jnp.pad(c.astype(jnp.float32), (0, tp - t))
    ld = logits_dtype or x.dtype
    params = pltriton.CompilerParams(num_warps=num_warps, num_stages=1)
    stats = pl.pallas_call(
        functools.partial(_ce_lse_gpu_kernel, v=v, block_v=bv, nv=vp // bv, logits_dtype=ld),
        grid=(tp // bt,),
        in_specs=[pl.BlockSpec((bt, hp), lambda i: (i, 0)), pl.BlockSpec((hp, vp), lambda i: (0, 0))],
        out_specs=[pl.BlockSpec((bt,), lambda i: (i,))] * 2,
        out_shape=[jax.ShapeDtypeStruct((tp,), jnp.float32)] * 2,
        compiler_params=params,
        name="ce_lse_gpu",
    )(xp, wp)
    row = pl.BlockSpec((bt,), lambda i, j: (i,))
    dlogits = pl.pallas_call(
        functools.partial(_ce_dlogits_gpu_kernel, v=v, block_v=bv, logits_dtype=ld),
        grid=(tp // bt, vp // bv),
        in_specs=[pl.BlockSpec((bt, hp), lambda i, j: (i, 0)), pl.BlockSpec((hp, bv), lambda i, j: (0, j)), row, row, row, row],
        out_specs=pl.BlockSpec((bt, bv), lambda i, j: (i, j)),
        out_shape=jax.ShapeDtypeStruct((tp, vp), jnp.float32),
        compiler_params=params,
        name="ce_dlogits_gpu",
    )(xp, wp, lab, cp, *stats)
    dx = lax.dot_general(dlogits, wp.astype(jnp.float32), (((1,), (1,)), ((), ())), precision=precision)[:t, :h]
    dw = lax.dot_general(xp.astype(jnp.float32), dlogits, (((0,), (0,)), ((), ())), precision=precision)[:h, :v]
    return dx.astype(x.dtype), dw.astype(w.dtype)
