"""Two-pass row reduction on TPU (Mosaic): softmax, RMSNorm or LayerNorm over the last axis for rows too long to
hold on chip.

One kernel, grid (row blocks, pass, column blocks): pass 0 reads each row in
``block_cols``-wide column blocks and folds them into the rows' f32 statistics
in VMEM scratch (softmax: a running max and sum of exponentials; RMSNorm: the
sum of x^2; LayerNorm: the sums of x and x^2); pass 1 reads the blocks again
and writes them normalised (times the weight, plus the bias, when given). The
output block keeps one index through pass 0 (nothing is written back) and
follows the column blocks in pass 1. Blocks are requests: the largest multiple
of the sublane tile (rows) or of 128 (columns) dividing the size, else the
whole axis (always a legal block).

Self-contained (jax only): mk's offline author copies it verbatim into the
kernels it writes.
"""

import functools

import jax
import jax.numpy as jnp
from jax import lax
from jax.experimental import pallas as pl
from jax.experimental.pallas import tpu as pltpu


def _tp_normalise(x, a, b, *, kind, d, eps):
    if kind == "softmax":
        return jnp.exp(x - a) / b
    if kind == "rms":
        return x * lax.rsqrt(b / d + eps)
    mu = a / d
    return (x - mu) * lax.rsqrt(jnp.maximum(b / d - mu * mu, 0.0) + eps)


def _two_pass_tpu_kernel(*refs, kind, d, eps, has_w, has_b):
    x_ref = refs[0]
    w_ref = refs[1] if has_w else None
    bias_ref = refs[1 + has_w] if has_b else None
    o_ref, a_ref, b_ref = refs[1 + has_w + has_b:]
    p, j = pl.program_id(1), pl.program_id(2)
    x = x_ref[...].astype(jnp.float32)

    @pl.when((p == 0) & (j == 0))
    def _init():
        a_ref[...] = jnp.full(a_ref.shape, -1e30 if kind == "softmax" else 0.0, jnp.float32)
        b_ref[...] = jnp.zeros(b_ref.shape, jnp.float32)

    @pl.when(p == 0)
    def _stats():
        if kind == "softmax":
            m_new = jnp.maximum(a_ref[...], jnp.max(x, axis=1, keepdims=True))
            b_ref[...] = b_ref[...] * jnp.exp(a_ref[...] - m_new) + jnp.sum(jnp.exp(x - m_new), axis=1, keepdims=True)
            a_ref[...] = m_new
        else:
            a_ref[...] += jnp.sum(x, axis=1, keepdims=True)
            b_ref[...] += jnp.sum(x * x, axis=1, keepdims=True)

    @pl.when(p == 1)
    def _apply():
        y = _tp_normalise(x, a_ref[...], b_ref[...], kind=kind, d=d, eps=eps)
        if has_w:
            y = y * w_ref[...].astype(jnp.float32)
        if has_b:
            y = y + bias_ref[...].astype(jnp.float32)
        o_ref[...] = y.astype(o_ref.dtype)


def _tp_block(n, want, quantum):
    """The largest multiple of quantum dividing n, at most want; n itself (the whole axis) when none does."""
    for b in range(min(want, n) // quantum * quantum, 0, -quantum):
        if n % b == 0:
            return b
    return n


def two_pass_tpu(x, w=None, b=None, *, kind, eps=0.0, out_dtype=None, block_rows=64, block_cols=2048):
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
    sublanes = 8 * max(1, 4 // min(jnp.dtype(x.dtype).itemsize, out_dtype.itemsize))
    br = _tp_block(n, block_rows, sublanes)
    bc = _tp_block(d, block_cols, 128)
    params = [q.reshape(1, d) for q in (w, b) if q is not None]
    out = pl.pallas_call(
        functools.partial(_two_pass_tpu_kernel, kind=kind, d=d, eps=eps, has_w=w is not None, has_b=b is not None),
        grid=(n // br, 2, d // bc),
        in_specs=[pl.BlockSpec((br, bc), lambda i, p, j: (i, j))]
        + [pl.BlockSpec((1, bc), lambda i, p, j: (0, j))] * len(params),
        out_specs=pl.BlockSpec((br, bc), lambda i, p, j: (i, j * p)),
        out_shape=jax.ShapeDtypeStruct((n, d), out_dtype),
        scratch_shapes=[pltpu.VMEM((br, 1), jnp.float32), pltpu.VMEM((br, 1), jnp.float32)],
        compiler_params=pltpu.CompilerParams(dimension_semantics=("parallel", "arbitrary", "arbitrary")),
        name="rowwise_two_pass",
    )(x2, *params)
    return out.reshape(x.shape)
