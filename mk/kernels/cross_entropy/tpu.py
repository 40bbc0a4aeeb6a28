"""LM-head cross-entropy on TPU (Mosaic): the fused forward (online log-sum-exp over vocabulary blocks, logits
never in HBM) and the backward (the log-sum-exp recomputed, dlogits per tile, dx/dW by matmuls).

Forward, :func:`ce_fwd_tpu`: grid (T/block_t, V/block_v), the vocabulary axis
"arbitrary": each step computes a (block_t, block_v) logits tile from
(block_t, H) x (H, block_v) in VMEM (rounded to the logits dtype, then f32
math) and updates a running max, sum of exponentials and picked logit per
token in f32 VMEM scratch; only per-token losses (T,) reach HBM. W is read in
its own layout, (H, V) or (V, H) (``w_vocab_first``); x as (T, H) or (H, T)
(``x_tokens_first``). ``block_v`` shrinks to a multiple of 128 dividing V;
otherwise W is zero-padded to a multiple of ``block_v`` and the padded columns
masked to -1e30 (labels never point there); T likewise with a quantum of 8.

Backward, :func:`ce_bwd_tpu`: for x (T, H), W (H, V), integer labels (T,) and
per-token cotangents c (T,) of ``loss_t = lse(x @ W)_t - (x @ W)[t, label_t]``:

1. ``lse``: grid (T/block_t, V/block_v), the vocabulary axis "arbitrary": each
   step computes a (block_t, block_v) logits tile in VMEM (rounded to the
   forward's logits dtype) and updates a running max and sum of exponentials
   (f32 scratch); the forward saved nothing, so the backward recomputes it. The
   max ``m`` and ``log(sum)`` are kept apart (not added into one f32 lse, whose
   rounding at large logits, ~1e-3 at 1e4, would be every probability's error).
2. ``dx``: grid (T/block_t, V/block_v), the vocabulary axis "arbitrary": the
   tile again, ``dlogits = c_t * (exp((logit - m_t) - log s_t) - onehot(label_t))``
   in f32, and ``dx[i] += dlogits @ W[:, j]^T`` into an f32 block resident
   across the vocabulary axis.
3. ``dW``: grid (V/block_v, T/block_t), the token axis "arbitrary": the same
   dlogits tile, ``dW[:, j] += x[i]^T @ dlogits``. The dlogits never reach HBM
   (each tile is recomputed once more instead); every product runs in a kernel.

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


def _hp(*xs):
    """HIGHEST for float32 operands (Mosaic runs precision=None as one bf16 pass, Triton as TF32), else None."""
    return lax.Precision.HIGHEST if any(x.dtype == jnp.float32 for x in xs) else None

_MASKED_LOGIT = -1e30


def _fit(n, want, quantum):
    """(block, padded n): the largest multiple of quantum <= want dividing n (and at least want / 4), else want
    with n padded to a multiple of it; n rounded up to quantum when smaller than want."""
    want = max(quantum, want // quantum * quantum)
    if n <= want:
        size = -(-n // quantum) * quantum
        return size, size
    for b in range(want, quantum - 1, -quantum):
        if n % b == 0 and b * 4 >= want:
            return b, n
    return want, -(-n // want) * want


def _ce_fwd_kernel(lab_ref, x_ref, w_ref, o_ref, m_ref, s_ref, p_ref, *, block_v, nv, vocab, masked, w_vocab_first,
                   logits_dtype):
    j = pl.program_id(1)

    @pl.when(j == 0)
    def _init():
        m_ref[...] = jnp.full(m_ref.shape, _MASKED_LOGIT, jnp.float32)
        s_ref[...] = jnp.zeros(s_ref.shape, jnp.float32)
        p_ref[...] = jnp.zeros(p_ref.shape, jnp.float32)

    w_dims = (((1,), (1,)), ((), ())) if w_vocab_first else (((1,), (0,)), ((), ()))
    logits = lax.dot_general(x_ref[...], w_ref[...], w_dims, preferred_element_type=jnp.float32, precision=_hp(x_ref, w_ref))
    logits = logits.astype(logits_dtype).astype(jnp.float32)
    cols = j * block_v + lax.broadcasted_iota(jnp.int32, logits.shape, 1)
    if masked:
        logits = jnp.where(cols < vocab, logits, _MASKED_LOGIT)
    m_prev = m_ref[...]
    m_new = jnp.maximum(m_prev, jnp.max(logits, axis=1, keepdims=True))
    s_ref[...] = jnp.exp(m_prev - m_new) * s_ref[...] + jnp.sum(jnp.exp(logits - m_new), axis=1, keepdims=True)
    m_ref[...] = m_new
    p_ref[...] += jnp.sum(jnp.where(cols == lab_ref[...], logits, 0.0), axis=1, keepdims=True)

    @pl.when(j == nv - 1)
    def _done():
        o_ref[...] = m_ref[...] + jnp.log(s_ref[...]) - p_ref[...]


def ce_fwd_tpu(x, w, labels, *, w_vocab_first=False, x_tokens_first=True, logits_dtype=None, block_t=256,
               block_v=512):
    """``lse(x @ W) - (x @ W)[label]`` per token, f32 (T,): x (T, H) (or (H, T) when not ``x_tokens_first``), W
    (H, V) (or (V, H) when ``w_vocab_first``), integer labels (T,); the logits rounded to ``logits_dtype`` (x's
    dtype by default) like ``jnp.dot``'s."""
    if not x_tokens_first:
        x = x.T
    tokens, hidden = x.shape
    vocab, w_hidden = (w.shape[0], w.shape[1]) if w_vocab_first else (w.shape[1], w.shape[0])
    if w_hidden != hidden or labels.shape != (tokens,):
        raise ValueError(f"expected x (T, H), w {'(V, H)' if w_vocab_first else '(H, V)'} and labels (T,), got "
                         f"{x.shape=}, {w.shape=}, {labels.shape=}")
    block_t, t_pad = _fit(tokens, block_t, 8)
    block_v, v_pad = _fit(vocab, block_v, 128)
    labels = labels.astype(jnp.int32).reshape(tokens, 1)
    if t_pad != tokens:
        x = jnp.pad(x, ((0, t_pad - tokens), (0, 0)))
        labels = jnp.pad(labels, ((0, t_pad - tokens), (0, 0)))
    if v_pad != vocab:
        w = jnp.pad(w, ((0, v_pad - vocab), (0, 0)) if w_vocab_first else ((0, 0), (0, v_pad - vocab)))
    nv = v_pad // block_v
    if w_vocab_first:
        w_spec = pl.BlockSpec((block_v, hidden), lambda i, j: (j, 0))
    else:
        w_spec = pl.BlockSpec((hidden, block_v), lambda i, j: (0, j))
    out = pl.pallas_call(
        functools.partial(_ce_fwd_kernel, block_v=block_v, nv=nv, vocab=vocab, masked=v_pad != vocab,
                          w_vocab_first=w_vocab_first, logits_dtype=jnp.dtype(logits_dtype or x.dtype)),
        grid=(t_pad // block_t, nv),
        in_specs=[
            pl.BlockSpec((block_t, 1), lambda i, j: (i, 0)),
            pl.BlockSpec((block_t, hidden), lambda i, j: (i, 0)),
            w_spec,
        ],
        out_specs=pl.BlockSpec((block_t, 1), lambda i, j: (i, 0)),
        out_shape=jax.ShapeDtypeStruct((t_pad, 1), jnp.float32),
        scratch_shapes=[pltpu.VMEM((block_t, 1), jnp.float32) for _ in range(3)],
        compiler_params=pltpu.CompilerParams(dimension_semantics=("parallel", "arbitrary"),
                                             vmem_limit_bytes=48 * 2**20),
        name="ce_fwd_tpu",
    )(labels, x, w)
    return out[:tokens, 0]


def _ce_tile(x_ref, w_ref, j, *, v, block_v, logits_dtype, precision):
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

    logits, _ = _ce_tile(x_ref, w_ref, j, **tile)
    m_new = jnp.maximum(m_ref[...], jnp.max(logits, axis=1, keepdims=True))
    s_ref[...] = s_ref[...] * jnp.exp(m_ref[...] - m_new) + jnp.sum(jnp.exp(logits - m_new), axis=1, keepdims=True)
    m_ref[...] = m_new

    @pl.when(j == nv - 1)
    def _store():
        max_ref[...] = m_ref[...]
        logs_ref[...] = jnp.log(s_ref[...])


def _ce_dlogits(x_ref, w_ref, lab_ref, c_ref, max_ref, logs_ref, j, **tile):
    logits, col = _ce_tile(x_ref, w_ref, j, **tile)
    p = jnp.exp((logits - max_ref[...]) - logs_ref[...])
    return c_ref[...] * (p - (col == lab_ref[...]).astype(jnp.float32))


def _ce_dx_kernel(x_ref, w_ref, lab_ref, c_ref, max_ref, logs_ref, dx_ref, **tile):
    """Grid (token blocks, vocabulary blocks "arbitrary"): dx[i] += dlogits[i, j] @ W[:, j]^T, in f32."""
    j = pl.program_id(1)

    @pl.when(j == 0)
    def _zero():
        dx_ref[...] = jnp.zeros_like(dx_ref)

    d = _ce_dlogits(x_ref, w_ref, lab_ref, c_ref, max_ref, logs_ref, j, **tile)
    dx_ref[...] += lax.dot_general(d, w_ref[...].astype(jnp.float32), (((1,), (1,)), ((), ())),
                                   precision=tile["precision"], preferred_element_type=jnp.float32)


def _ce_dw_kernel(x_ref, w_ref, lab_ref, c_ref, max_ref, logs_ref, dw_ref, **tile):
    """Grid (vocabulary blocks, token blocks "arbitrary"): dW[:, j] += x[i]^T @ dlogits[i, j], in f32."""
    i, j = pl.program_id(1), pl.program_id(0)

    @pl.when(i == 0)
    def _zero():
        dw_ref[...] = jnp.zeros_like(dw_ref)

    d = _ce_dlogits(x_ref, w_ref, lab_ref, c_ref, max_ref, logs_ref, j, **tile)
    dw_ref[...] += lax.dot_general(x_ref[...].astype(jnp.float32), d, (((0,), (0,)), ((), ())),
                                   precision=tile["precision"], preferred_element_type=jnp.float32)


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
    row_t = pl.BlockSpec((bt, 1), lambda j, i: (i, 0))
    dx = pl.pallas_call(
        functools.partial(_ce_dx_kernel, **tile),
        grid=grid,
        in_specs=[x_spec, w_spec, row, row, row, row],
        out_specs=pl.BlockSpec((bt, h), lambda i, j: (i, 0)),
        out_shape=jax.ShapeDtypeStruct((tp, h), jnp.float32),
        compiler_params=pltpu.CompilerParams(dimension_semantics=("parallel", "arbitrary")),
        name="ce_dlogits_tpu",
    )(xp, wp, lab, cp, *stats)[:t]
    dw = pl.pallas_call(
        functools.partial(_ce_dw_kernel, **tile),
        grid=grid[::-1],
        in_specs=[pl.BlockSpec((bt, h), lambda j, i: (i, 0)), pl.BlockSpec((h, bv), lambda j, i: (0, j)),
                  row_t, row_t, row_t, row_t],
        out_specs=pl.BlockSpec((h, bv), lambda j, i: (0, j)),
        out_shape=jax.ShapeDtypeStruct((h, vp), jnp.float32),
        compiler_params=pltpu.CompilerParams(dimension_semantics=("parallel", "arbitrary")),
        name="ce_dw_tpu",
    )(xp, wp, lab, cp, *stats)[:, :v]
    return dx.astype(x.dtype), dw.astype(w.dtype)
