"""LM-head cross-entropy on GPU (Pallas Triton): the fused forward (online log-sum-exp, logits never in HBM) and the
backward (the log-sum-exp recomputed, dlogits per tile, dx/dW by matmuls).

Forward, :func:`ce_fwd_gpu`: one program per token block (Triton has no
scratch memory); a ``lax.fori_loop`` over vocabulary blocks (``pl.ds`` slices
of W, read in its own layout, (H, V) or (V, H)) carries the running max, sum of
exponentials and picked logit per token in registers, and an inner loop over
hidden chunks accumulates each (block_t, block_v) logits tile in f32, rounded
to the logits dtype. Blocks are powers of two; T, V and H are zero-padded to
multiples of them (padded vocabulary columns masked, padded tokens sliced off,
padded hidden columns contribute zero).

Backward, :func:`ce_bwd_gpu`: the same computation as
:mod:`mk.kernels.cross_entropy.tpu`. ``lse``: one
program per token block loops (``lax.fori_loop`` over ``pl.ds`` slices of W)
over vocabulary blocks with a running max and sum of exponentials in
registers. ``dx``: one program per token block loops over vocabulary blocks,
recomputes each dlogits tile and accumulates ``dlogits @ W^T`` in f32; ``dW``:
one program per vocabulary block loops over token blocks and accumulates
``x^T @ dlogits``. The dlogits never reach HBM; every product runs in a kernel. T, H and V are
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


def _hp(*xs):
    """HIGHEST for float32 operands (Mosaic runs precision=None as one bf16 pass, Triton as TF32), else None."""
    return lax.Precision.HIGHEST if any(x.dtype == jnp.float32 for x in xs) else None

_MASKED_LOGIT = -1e30


def _ce_pow2(n):
    return 1 << max(0, (n - 1).bit_length())


def _ce_logits(x, w, col, v, logits_dtype):
    logits = jnp.dot(x, w, preferred_element_type=jnp.float32, precision=_hp(x, w)).astype(logits_dtype).astype(jnp.float32)
    return jnp.where(col < v, logits, _MASKED_LOGIT)


def _pow2_block(n, want):
    """(block, padded n): the largest power of two <= want (and >= want / 4) dividing n, else want with n padded."""
    b = want
    while b * 4 >= want and b >= 16:
        if n % b == 0:
            return b, n
        b //= 2
    return want, -(-n // want) * want


def _ce_fwd_gpu_kernel(lab_ref, x_ref, w_ref, o_ref, *, block_v, block_h, nv, nh, vocab, masked, w_vocab_first,
                       logits_dtype):
    labels = lab_ref[...]
    block_t = labels.shape[0]

    def logits_tile(v0):
        def chunk(c, acc):
            h0 = pl.multiple_of(c * block_h, block_h)
            x = x_ref[:, pl.ds(h0, block_h)]
            if w_vocab_first:
                w = w_ref[pl.ds(v0, block_v), pl.ds(h0, block_h)]
                dims = (((1,), (1,)), ((), ()))
            else:
                w = w_ref[pl.ds(h0, block_h), pl.ds(v0, block_v)]
                dims = (((1,), (0,)), ((), ()))
            return acc + lax.dot_general(x, w, dims, preferred_element_type=jnp.float32, precision=_hp(x, w))

        acc = lax.fori_loop(0, nh, chunk, jnp.zeros((block_t, block_v), jnp.float32))
        return acc.astype(logits_dtype).astype(jnp.float32)

    def step(j, carry):
        m, s, picked = carry
        v0 = pl.multiple_of(j * block_v, block_v)
        logits = logits_tile(v0)
        cols = v0 + lax.broadcasted_iota(jnp.int32, (block_t, block_v), 1)
        if masked:
            logits = jnp.where(cols < vocab, logits, _MASKED_LOGIT)
        m_new = jnp.maximum(m, jnp.max(logits, axis=1))
        s = jnp.exp(m - m_new) * s + jnp.sum(jnp.exp(logits - m_new[:, None]), axis=1)
        picked = picked + jnp.sum(jnp.where(cols == labels[:, None], logits, 0.0), axis=1)
        return m_new, s, picked

    init = (jnp.full((block_t,), _MASKED_LOGIT, jnp.float32), jnp.zeros((block_t,), jnp.float32),
            jnp.zeros((block_t,), jnp.float32))
    m, s, picked = lax.fori_loop(0, nv, step, init)
    o_ref[...] = m + jnp.log(s) - picked


def ce_fwd_gpu(x, w, labels, *, w_vocab_first=False, x_tokens_first=True, logits_dtype=None, block_t=64,
               block_v=128, block_h=64, num_warps=4, num_stages=2):
    """``lse(x @ W) - (x @ W)[label]`` per token, f32 (T,): x (T, H) (or (H, T) when not ``x_tokens_first``), W
    (H, V) (or (V, H) when ``w_vocab_first``), integer labels (T,); the logits rounded to ``logits_dtype`` (x's
    dtype by default) like ``jnp.dot``'s. Blocks are powers of two >= 16."""
    if not x_tokens_first:
        x = x.T
    tokens, hidden = x.shape
    vocab, w_hidden = (w.shape[0], w.shape[1]) if w_vocab_first else (w.shape[1], w.shape[0])
    if w_hidden != hidden or labels.shape != (tokens,):
        raise ValueError(f"expected x (T, H), w {'(V, H)' if w_vocab_first else '(H, V)'} and labels (T,), got "
                         f"{x.shape=}, {w.shape=}, {labels.shape=}")
    block_t, t_pad = _pow2_block(tokens, block_t)
    block_v, v_pad = _pow2_block(vocab, block_v)
    block_h, h_pad = _pow2_block(hidden, block_h)
    labels = labels.astype(jnp.int32)
    if t_pad != tokens or h_pad != hidden:
        x = jnp.pad(x, ((0, t_pad - tokens), (0, h_pad - hidden)))
        labels = jnp.pad(labels, (0, t_pad - tokens))
    if v_pad != vocab or h_pad != hidden:
        w = jnp.pad(w, ((0, v_pad - vocab), (0, h_pad - hidden)) if w_vocab_first
                    else ((0, h_pad - hidden), (0, v_pad - vocab)))
    out = pl.pallas_call(
        functools.partial(_ce_fwd_gpu_kernel, block_v=block_v, block_h=block_h, nv=v_pad // block_v,
                          nh=h_pad // block_h, vocab=vocab, masked=v_pad != vocab, w_vocab_first=w_vocab_first,
                          logits_dtype=jnp.dtype(logits_dtype or x.dtype)),
        grid=(t_pad // block_t,),
        in_specs=[
            pl.BlockSpec((block_t,), lambda i: (i,)),
            pl.BlockSpec((block_t, h_pad), lambda i: (i, 0)),
            pl.BlockSpec(w.shape, lambda i: (0, 0)),
        ],
        out_specs=pl.BlockSpec((block_t,), lambda i: (i,)),
        out_shape=jax.ShapeDtypeStruct((t_pad,), jnp.float32),
        compiler_params=pltriton.CompilerParams(num_warps=num_warps, num_stages=num_stages),
        name="ce_fwd_gpu",
    )(labels, x, w)
    return out[:tokens]


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


def _ce_dlogits_gpu(x, w, col, lab, c, m, logs, v, logits_dtype):
    logits = _ce_logits(x, w, col, v, logits_dtype)
    p = jnp.exp((logits - m[:, None]) - logs[:, None])
    return c[:, None] * (p - (col == lab[:, None]).astype(jnp.float32))


def _ce_dx_gpu_kernel(x_ref, w_ref, lab_ref, c_ref, max_ref, logs_ref, dx_ref, *, v, block_v, nv, logits_dtype,
                      precision):
    """One program per token block: a loop over vocabulary blocks, dx += dlogits @ W[:, j]^T in f32 registers."""
    x = x_ref[...]
    lab, c, m, logs = lab_ref[...], c_ref[...], max_ref[...], logs_ref[...]
    bt = x.shape[0]

    def step(j, acc):
        w = w_ref[:, pl.ds(j * block_v, block_v)]
        col = j * block_v + lax.broadcasted_iota(jnp.int32, (bt, block_v), 1)
        d = _ce_dlogits_gpu(x, w, col, lab, c, m, logs, v, logits_dtype)
        return acc + lax.dot_general(d, w.astype(jnp.float32), (((1,), (1,)), ((), ())), precision=precision,
                                     preferred_element_type=jnp.float32)

    dx_ref[...] = lax.fori_loop(0, nv, step, jnp.zeros(dx_ref.shape, jnp.float32))


def _ce_dw_gpu_kernel(x_ref, w_ref, lab_ref, c_ref, max_ref, logs_ref, dw_ref, *, v, block_t, nt, logits_dtype,
                      precision):
    """One program per vocabulary block: a loop over token blocks, dW[:, j] += x[i]^T @ dlogits in f32 registers."""
    w = w_ref[...]
    bv = w.shape[1]
    col = pl.program_id(0) * bv + lax.broadcasted_iota(jnp.int32, (block_t, bv), 1)

    def step(i, acc):
        rows = pl.ds(i * block_t, block_t)
        x = x_ref[rows, :]
        d = _ce_dlogits_gpu(x, w, col, lab_ref[rows], c_ref[rows], max_ref[rows], logs_ref[rows], v, logits_dtype)
        return acc + lax.dot_general(x.astype(jnp.float32), d, (((0,), (0,)), ((), ())), precision=precision,
                                     preferred_element_type=jnp.float32)

    dw_ref[...] = lax.fori_loop(0, nt, step, jnp.zeros(dw_ref.shape, jnp.float32))


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
    dx = pl.pallas_call(
        functools.partial(_ce_dx_gpu_kernel, v=v, block_v=bv, nv=vp // bv, logits_dtype=ld, precision=precision),
        grid=(tp // bt,),
        in_specs=[pl.BlockSpec((bt, hp), lambda i: (i, 0)), pl.BlockSpec((hp, vp), lambda i: (0, 0))]
        + [pl.BlockSpec((bt,), lambda i: (i,))] * 4,
        out_specs=pl.BlockSpec((bt, hp), lambda i: (i, 0)),
        out_shape=jax.ShapeDtypeStruct((tp, hp), jnp.float32),
        compiler_params=params,
        name="ce_dlogits_gpu",
    )(xp, wp, lab, cp, *stats)[:t, :h]
    dw = pl.pallas_call(
        functools.partial(_ce_dw_gpu_kernel, v=v, block_t=bt, nt=tp // bt, logits_dtype=ld, precision=precision),
        grid=(vp // bv,),
        in_specs=[pl.BlockSpec((tp, hp), lambda j: (0, 0)), pl.BlockSpec((hp, bv), lambda j: (0, j))]
        + [pl.BlockSpec((tp,), lambda j: (0,))] * 4,
        out_specs=pl.BlockSpec((hp, bv), lambda j: (0, j)),
        out_shape=jax.ShapeDtypeStruct((hp, vp), jnp.float32),
        compiler_params=params,
        name="ce_dw_gpu",
    )(xp, wp, lab, cp, *stats)[:h, :v]
    return dx.astype(x.dtype), dw.astype(w.dtype)
