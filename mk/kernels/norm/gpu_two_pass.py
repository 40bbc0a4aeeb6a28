"""Two-pass row reduction on GPU (Pallas Triton): softmax, RMSNorm or LayerNorm over the last axis for rows too
long to hold in registers at once.

One program per block of rows: a first ``lax.fori_loop`` over the row's
``block_cols``-wide column blocks (``pl.ds`` slices) folds them into f32
statistics (softmax: a running max and sum of exponentials; RMSNorm: the sum
of x^2; LayerNorm: the sums of x and x^2), a second loop reads them again and
writes them normalised (times the weight, plus the bias, when given). Blocks
are powers of two (Triton's rule); rows and columns are zero-padded to
multiples of them and the padded columns masked out of the statistics.

Self-contained (jax only): mk's offline author copies it verbatim into the
kernels it writes.
"""

import functools

import jax
import jax.numpy as jnp
from jax import lax
from jax.experimental import pallas as pl
from jax.experimental.pallas import triton as pltriton


def _tp_pow2(n):
    return 1 << max(0, (n - 1).bit_length())


def _tp_normalise(x, a, b, *, kind, d, eps):
    if kind == "softmax":
        return jnp.exp(x - a) / b
    if kind == "rms":
        return x * lax.rsqrt(b / d + eps)
    mu = a / d
    return (x - mu) * lax.rsqrt(jnp.maximum(b / d - mu * mu, 0.0) + eps)


def _two_pass_gpu_kernel(*refs, kind, d, eps, has_w, has_b, block_cols, ncols):
    x_ref = refs[0]
    w_ref = refs[1] if has_w else None
    bias_ref = refs[1 + has_w] if has_b else None
    o_ref = refs[-1]
    br = x_ref.shape[0]

    def cols(j):
        return pl.ds(j * block_cols, block_cols)

    def stats(j, carry):
        a, s = carry
        x = x_ref[:, cols(j)].astype(jnp.float32)
        live = j * block_cols + lax.broadcasted_iota(jnp.int32, x.shape, 1) < d
        if kind == "softmax":
            x = jnp.where(live, x, -1e30)
            m_new = jnp.maximum(a, jnp.max(x, axis=1))
            return m_new, s * jnp.exp(a - m_new) + jnp.sum(jnp.exp(x - m_new[:, None]), axis=1)
        x = jnp.where(live, x, 0.0)
        return a + jnp.sum(x, axis=1), s + jnp.sum(x * x, axis=1)

    init = (jnp.full((br,), -1e30 if kind == "softmax" else 0.0, jnp.float32), jnp.zeros((br,), jnp.float32))
    a, s = lax.fori_loop(0, ncols, stats, init)

    def apply(j, carry):
        x = x_ref[:, cols(j)].astype(jnp.float32)
        y = _tp_normalise(x, a[:, None], s[:, None], kind=kind, d=d, eps=eps)
        if has_w:
            y = y * w_ref[cols(j)].astype(jnp.float32)[None, :]
        if has_b:
            y = y + bias_ref[cols(j)].astype(jnp.float32)[None, :]
        o_ref[:, cols(j)] = y.astype(o_ref.dtype)
        return carry

    lax.fori_loop(0, ncols, apply, 0)


def two_pass_gpu(x, w=None, b=None, *, kind, eps=0.0, out_dtype=None, block_rows=16, block_cols=1024, num_warps=4):
    """``kind`` ("softmax", "rms" or "layer") over the last axis of x (..., D), times w (D,) and plus b (D,) when
    given; the result has x's shape and ``out_dtype`` (x's dtype by default)."""
    if kind not in ("softmax", "rms", "layer"):
        raise ValueError(f"kind must be 'softmax', 'rms' or 'layer', got {kind!r}")
    d = x.shape[-1]
    if any(q is not None and q.shape != (d,) for q in (w, b)):
        raise ValueError(f"expected w and b of shape ({d},) or None, got {None if w is None else w.shape} and "
                         f"{None if b is None else b.shape}")
    out_dtype = jnp.dtype(out_dtype or x.dtype)
    x2 = x.reshape(-1, d)
    n = x2.shape[0]
    br = max(1, min(_tp_pow2(block_rows), _tp_pow2(n)))
    bc = max(16, min(_tp_pow2(block_cols), _tp_pow2(d)))
    npad, dpad = -(-n // br) * br, -(-d // bc) * bc
    xp = jnp.pad(x2, ((0, npad - n), (0, dpad - d)))
    params = [jnp.pad(q, (0, dpad - d)) for q in (w, b) if q is not None]
    out = pl.pallas_call(
        functools.partial(_two_pass_gpu_kernel, kind=kind, d=d, eps=eps, has_w=w is not None, has_b=b is not None,
                          block_cols=bc, ncols=dpad // bc),
        grid=(npad // br,),
        in_specs=[pl.BlockSpec((br, dpad), lambda i: (i, 0))] + [pl.BlockSpec((dpad,), lambda i: (0,))] * len(params),
        out_specs=pl.BlockSpec((br, dpad), lambda i: (i, 0)),
        out_shape=jax.ShapeDtypeStruct((npad, dpad), out_dtype),
        compiler_params=pltriton.CompilerParams(num_warps=num_warps, num_stages=1),
        name="rowwise_two_pass",
    )(xp, *params)
    return out[:n, :d].reshape(x.shape)
