"""Causal decayed retention on GPU (Pallas Triton): the same computation as :mod:`mk.kernels.retention.tpu`.

One program per (batch, head, query block). The row normaliser needs the
whole row before the value product, so the program loops twice over the key
blocks at or below the diagonal: first summing ``pre(s)`` per row in
registers, then dividing the recomputed scores by ``post(sum)``, casting them
like the reference and accumulating ``p @ v`` in f32. ``one_pass=True``
reads the keys once: it accumulates the row sums and ``cast(s) @ v`` together
and divides at the end, so the scores are rounded before the division rather
than after it (half the score work; not the reference's rounding: judged
incorrect on RetNet's large-magnitude case, so mk's author does not offer it). Sizes are zero-padded to power-of-two blocks (Triton's
rule); padded keys lie above every real row's diagonal, padded rows and
columns are cut off. The block is a request: each program holds its q block, ``num_stages`` buffers of the k and
v blocks (Triton's pipeline) and an f32 accumulator, so a wide head shrinks it at trace time (`_fit_smem`) until the
estimated shared memory fits ``smem_bytes`` (the chip's budget), and takes more warps (or a smaller block) so the
accumulator and scores stay in registers.

Self-contained (jax only): mk's offline author copies it verbatim into the
kernels it writes.
"""

import functools

import jax
import jax.numpy as jnp
from jax import lax
from jax.experimental import pallas as pl
from jax.experimental.pallas import triton as pltriton


def _abs(s):
    return jnp.abs(s)


def _clamp_one(den):
    return jnp.maximum(jnp.abs(den), 1.0)


def _pow2(n):
    return 1 << max(0, (n - 1).bit_length())


def _fit(n, want):
    """(block, padded n): a power-of-two block >= 16 and at most want, n padded to a multiple of it."""
    b = max(16, min(_pow2(want), _pow2(n)))
    return b, -(-n // b) * b


def _fit_smem(b, *, d, dv, itemsize, num_warps, num_stages, smem_bytes):
    """(block, num_warps): the power-of-two block b halved (not below 16) until the program's Triton working set
    fits in shared memory: the q block and ``num_stages`` buffers of the k and v blocks within ``smem_bytes``; then
    the f32 accumulator and score tile kept within about 96 registers a thread, by up to 8 warps first (the block
    kept), by halving the block after."""
    while b > 16 and (b * d + num_stages * b * (d + dv)) * itemsize > smem_bytes:
        b //= 2
    while b * (dv + b) // (32 * num_warps) > 96:
        if num_warps < 8:
            num_warps *= 2
        elif b > 16:
            b //= 2
        else:
            break
    return b, num_warps


def _scores(q, k_ref, c_ref, cq, i, j, block_q, block_k, precision):
    k = k_ref[pl.ds(j * block_k, block_k), :]
    s = lax.dot_general(q, k, (((1,), (1,)), ((), ())), precision=precision, preferred_element_type=jnp.float32)
    ck = c_ref[pl.ds(j * block_k, block_k)]
    rows = i * block_q + lax.broadcasted_iota(jnp.int32, s.shape, 0)
    cols = j * block_k + lax.broadcasted_iota(jnp.int32, s.shape, 1)
    return s * jnp.exp(jnp.where(cols <= rows, cq[:, None] - ck[None, :], -jnp.inf))


def _row_divisor(q_ref, k_ref, c_ref, *, block_q, block_k, pre, post, precision):
    i = pl.program_id(2)
    q, cq = q_ref[...], c_ref[pl.ds(i * block_q, block_q)]
    live = (i * block_q + block_q - 1) // block_k + 1

    def step(j, den):
        s = _scores(q, k_ref, c_ref, cq, i, j, block_q, block_k, precision)
        return den + jnp.sum(pre(s), axis=1)

    return q, cq, live, post(lax.fori_loop(0, live, step, jnp.zeros((block_q,), jnp.float32)))


def _values(q, cq, live, div, k_ref, v_ref, c_ref, o_ref, *, block_q, block_k, pv_dtype, precision):
    i = pl.program_id(2)

    def step(j, acc):
        s = _scores(q, k_ref, c_ref, cq, i, j, block_q, block_k, precision)
        p = (s / div[:, None]).astype(pv_dtype)
        v = v_ref[pl.ds(j * block_k, block_k), :]
        return acc + lax.dot_general(p, v, (((1,), (0,)), ((), ())), precision=precision,
                                     preferred_element_type=jnp.float32)

    acc = lax.fori_loop(0, live, step, jnp.zeros(o_ref.shape, jnp.float32))
    o_ref[...] = acc.astype(o_ref.dtype)


def _fused_kernel(q_ref, k_ref, v_ref, c_ref, o_ref, *, block_q, block_k, pre, post, pv_dtype, precision):
    q, cq, live, div = _row_divisor(q_ref, k_ref, c_ref, block_q=block_q, block_k=block_k, pre=pre, post=post,
                                    precision=precision)
    _values(q, cq, live, div, k_ref, v_ref, c_ref, o_ref, block_q=block_q, block_k=block_k, pv_dtype=pv_dtype,
            precision=precision)


def _one_pass_kernel(q_ref, k_ref, v_ref, c_ref, o_ref, *, block_q, block_k, pre, post, pv_dtype, precision):
    i = pl.program_id(2)
    q, cq = q_ref[...], c_ref[pl.ds(i * block_q, block_q)]
    live = (i * block_q + block_q - 1) // block_k + 1

    def step(j, carry):
        den, acc = carry
        s = _scores(q, k_ref, c_ref, cq, i, j, block_q, block_k, precision)
        v = v_ref[pl.ds(j * block_k, block_k), :]
        acc = acc + lax.dot_general(s.astype(pv_dtype), v, (((1,), (0,)), ((), ())), precision=precision,
                                    preferred_element_type=jnp.float32)
        return den + jnp.sum(pre(s), axis=1), acc

    den, acc = lax.fori_loop(0, live, step, (jnp.zeros((block_q,), jnp.float32), jnp.zeros(o_ref.shape, jnp.float32)))
    o_ref[...] = (acc / post(den)[:, None]).astype(o_ref.dtype)


def retention_gpu(q, k, v, c, *, pre=None, post=None, pv_dtype=None, out_dtype=None, precision=None, block_q=64,
                  block_k=64, num_warps=4, num_stages=2, one_pass=False, smem_bytes=192 << 10):
    """q/k/v (B, H, S, D), c (B, H, S) f32 -> (B, H, S, Dv), as :func:`retention_tpu`, on padded power-of-two
    blocks."""
    b, h, s, d = q.shape
    if k.shape != q.shape or v.shape[:3] != q.shape[:3] or c.shape != (b, h, s):
        raise ValueError(f"expected q/k (B, H, S, D), v (B, H, S, Dv), c (B, H, S), got {q.shape=}, {k.shape=}, "
                         f"{v.shape=}, {c.shape=}")
    dv = v.shape[3]
    # one block for queries and keys: the padded length is a multiple of both
    d_pad, dv_pad = max(16, _pow2(d)), max(16, _pow2(dv))
    bq, num_warps = _fit_smem(_fit(s, min(block_q, block_k))[0], d=d_pad, dv=dv_pad, itemsize=q.dtype.itemsize,
                              num_warps=num_warps, num_stages=num_stages, smem_bytes=smem_bytes)
    bq, s_pad = _fit(s, bq)
    bk = bq
    qp = jnp.pad(q, ((0, 0), (0, 0), (0, s_pad - s), (0, d_pad - d)))
    kp = jnp.pad(k, ((0, 0), (0, 0), (0, s_pad - s), (0, d_pad - d)))
    vp = jnp.pad(v, ((0, 0), (0, 0), (0, s_pad - s), (0, dv_pad - dv)))
    cp = jnp.pad(c.astype(jnp.float32), ((0, 0), (0, 0), (0, s_pad - s)))
    kw = dict(block_q=bq, block_k=bk, precision=precision)
    pre, post, pv_dtype = pre or _abs, post or _clamp_one, pv_dtype or v.dtype
    grid = (b, h, s_pad // bq)
    q_spec = pl.BlockSpec((None, None, bq, d_pad), lambda bb, hh, i: (bb, hh, i, 0))
    k_spec = pl.BlockSpec((None, None, s_pad, d_pad), lambda bb, hh, i: (bb, hh, 0, 0))
    v_spec = pl.BlockSpec((None, None, s_pad, dv_pad), lambda bb, hh, i: (bb, hh, 0, 0))
    c_spec = pl.BlockSpec((None, None, s_pad), lambda bb, hh, i: (bb, hh, 0))
    o_spec = pl.BlockSpec((None, None, bq, dv_pad), lambda bb, hh, i: (bb, hh, i, 0))
    params = pltriton.CompilerParams(num_warps=num_warps, num_stages=num_stages)
    out_shape = jax.ShapeDtypeStruct((b, h, s_pad, dv_pad), out_dtype or v.dtype)
    out = pl.pallas_call(
        functools.partial(_one_pass_kernel if one_pass else _fused_kernel, pre=pre, post=post, pv_dtype=pv_dtype,
                          **kw),
        grid=grid, in_specs=[q_spec, k_spec, v_spec, c_spec], out_specs=o_spec, out_shape=out_shape,
        compiler_params=params,
    )(qp, kp, vp, cp)
    return out[:, :, :s, :dv]
