"""Causal decayed retention on TPU (Mosaic): scores ``(q_i . k_j) exp(c_i - c_j)`` normalised per row, times values.

The row normaliser (RetNet's ``max(sum_j |s_ij|, 1)``, Mamba-2's signed sum)
needs the whole row before the value product, so every query block makes two
passes over its key blocks: the first sums ``pre(s)`` per row into a VMEM
column, the second divides the recomputed scores by ``post(sum)``, casts them
like the reference does and accumulates ``p @ v`` in f32. Key blocks wholly
above the diagonal are skipped (and not fetched: their index is clamped).

``retention_tpu(..., resident=False)`` streams key/value blocks along an
"arbitrary" grid axis of ``2 * nk`` steps (phase = step // nk);
``resident=True`` keeps the head's whole K, V (and decay row) in VMEM and runs
both passes as loops inside one grid step per query block. ``c`` (B, H, S) f32
is the cumulative log decay: RetNet's ``i * log(gamma_h)``, Mamba-2's
``cumsum(log a)`` (computed outside: Mosaic lowers no cumsum).

Self-contained (jax only): mk's offline author copies it verbatim into the
kernels it writes.
"""

import functools

import jax
import jax.numpy as jnp
from jax import lax
from jax.experimental import pallas as pl
from jax.experimental.pallas import tpu as pltpu


def _abs(s):
    return jnp.abs(s)


def _clamp_one(den):
    return jnp.maximum(jnp.abs(den), 1.0)


def _scores(q, k, cq, ck, row0, col0, precision):
    """(bq, bk) f32 causal decayed scores of q rows from row0 against k rows from col0."""
    s = lax.dot_general(q, k, (((1,), (1,)), ((), ())), precision=precision, preferred_element_type=jnp.float32)
    rows = row0 + lax.broadcasted_iota(jnp.int32, s.shape, 0)
    cols = col0 + lax.broadcasted_iota(jnp.int32, s.shape, 1)
    return s * jnp.exp(jnp.where(cols <= rows, cq - ck, -jnp.inf))


def _stream_kernel(q_ref, k_ref, v_ref, cq_ref, ck_ref, o_ref, den_ref, acc_ref, *, block_q, block_k, nk, pre,
                   post, pv_dtype, precision):
    i, t = pl.program_id(2), pl.program_id(3)
    j = t - nk * (t >= nk).astype(jnp.int32)
    live = j * block_k <= i * block_q + block_q - 1

    @pl.when(t == 0)
    def _init():
        den_ref[...] = jnp.zeros_like(den_ref)
        acc_ref[...] = jnp.zeros_like(acc_ref)

    def scores():
        return _scores(q_ref[...], k_ref[...], cq_ref[...], ck_ref[...], i * block_q, j * block_k, precision)

    @pl.when((t < nk) & live)
    def _row_sums():
        den_ref[...] += jnp.sum(pre(scores()), axis=1, keepdims=True)

    @pl.when((t >= nk) & live)
    def _values():
        p = (scores() / post(den_ref[...])).astype(pv_dtype)
        acc_ref[...] += lax.dot_general(p, v_ref[...], (((1,), (0,)), ((), ())), precision=precision,
                                        preferred_element_type=jnp.float32)

    @pl.when(t == 2 * nk - 1)
    def _store():
        o_ref[...] = acc_ref[...].astype(o_ref.dtype)


def _resident_kernel(q_ref, k_ref, v_ref, cq_ref, ck_ref, o_ref, *, block_q, block_k, pre, post, pv_dtype,
                     precision):
    i = pl.program_id(2)
    q, cq = q_ref[...], cq_ref[...]
    live = (i * block_q + block_q - 1) // block_k + 1

    def scores(j):
        at = pl.multiple_of(j * block_k, block_k)
        return _scores(q, k_ref[pl.ds(at, block_k), :], cq, ck_ref[:, pl.ds(at, block_k)], i * block_q,
                       j * block_k, precision)

    den = lax.fori_loop(0, live, lambda j, d: d + jnp.sum(pre(scores(j)), axis=1, keepdims=True),
                        jnp.zeros((block_q, 1), jnp.float32))
    div = post(den)

    def values(j, acc):
        at = pl.multiple_of(j * block_k, block_k)
        p = (scores(j) / div).astype(pv_dtype)
        return acc + lax.dot_general(p, v_ref[pl.ds(at, block_k), :], (((1,), (0,)), ((), ())), precision=precision,
                                     preferred_element_type=jnp.float32)

    acc = lax.fori_loop(0, live, values, jnp.zeros(o_ref.shape, jnp.float32))
    o_ref[...] = acc.astype(o_ref.dtype)


def _block(n, want, quantum):
    """The largest multiple of quantum dividing n and at most want; n itself when none does."""
    for b in range(min(want, n) // quantum * quantum, 0, -quantum):
        if n % b == 0:
            return b
    return n


def retention_tpu(q, k, v, c, *, pre=None, post=None, pv_dtype=None, out_dtype=None, precision=None, block_q=128,
                  block_k=128, resident=False):
    """q/k/v (B, H, S, D), c (B, H, S) f32 -> (B, H, S, D): ``sum_{j<=i} cast(s_ij / post(sum_j pre(s_ij))) v_j``,
    ``s_ij = (q_i . k_j) exp(c_i - c_j)``. ``pre`` (default ``abs``) and ``post`` (default ``max(|x|, 1)``) are
    elementwise; block sizes are requests fitted to S."""
    b, h, s, d = q.shape
    if k.shape != q.shape or v.shape[:3] != q.shape[:3] or c.shape != (b, h, s):
        raise ValueError(f"expected q/k (B, H, S, D), v (B, H, S, Dv), c (B, H, S), got {q.shape=}, {k.shape=}, "
                         f"{v.shape=}, {c.shape=}")
    dv = v.shape[3]
    sub = 8 * max(1, 4 // jnp.dtype(q.dtype).itemsize)
    bq, bk = _block(s, block_q, sub), _block(s, block_k, 128)
    nq, nk = s // bq, s // bk
    cq = c.astype(jnp.float32).reshape(b, h, s, 1)
    ck = c.astype(jnp.float32).reshape(b, h, 1, s)
    kw = dict(block_q=bq, block_k=bk, pre=pre or _abs, post=post or _clamp_one, pv_dtype=pv_dtype or v.dtype,
              precision=precision)
    out_shape = jax.ShapeDtypeStruct((b, h, s, dv), out_dtype or v.dtype)
    if resident:
        return pl.pallas_call(
            functools.partial(_resident_kernel, **kw),
            grid=(b, h, nq),
            in_specs=[pl.BlockSpec((None, None, bq, d), lambda bb, hh, i: (bb, hh, i, 0)),
                      pl.BlockSpec((None, None, s, d), lambda bb, hh, i: (bb, hh, 0, 0)),
                      pl.BlockSpec((None, None, s, dv), lambda bb, hh, i: (bb, hh, 0, 0)),
                      pl.BlockSpec((None, None, bq, 1), lambda bb, hh, i: (bb, hh, i, 0)),
                      pl.BlockSpec((None, None, 1, s), lambda bb, hh, i: (bb, hh, 0, 0))],
            out_specs=pl.BlockSpec((None, None, bq, dv), lambda bb, hh, i: (bb, hh, i, 0)),
            out_shape=out_shape,
            compiler_params=pltpu.CompilerParams(dimension_semantics=("parallel", "parallel", "parallel")),
        )(q, k, v, cq, ck)

    def kv(i, t):  # the key block of step t, clamped to the last one the query block needs
        return jnp.minimum(t - nk * (t >= nk).astype(jnp.int32), (i * bq + bq - 1) // bk)

    return pl.pallas_call(
        functools.partial(_stream_kernel, nk=nk, **kw),
        grid=(b, h, nq, 2 * nk),
        in_specs=[pl.BlockSpec((None, None, bq, d), lambda bb, hh, i, t: (bb, hh, i, 0)),
                  pl.BlockSpec((None, None, bk, d), lambda bb, hh, i, t: (bb, hh, kv(i, t), 0)),
                  pl.BlockSpec((None, None, bk, dv), lambda bb, hh, i, t: (bb, hh, kv(i, t), 0)),
                  pl.BlockSpec((None, None, bq, 1), lambda bb, hh, i, t: (bb, hh, i, 0)),
                  pl.BlockSpec((None, None, 1, bk), lambda bb, hh, i, t: (bb, hh, 0, kv(i, t)))],
        out_specs=pl.BlockSpec((None, None, bq, dv), lambda bb, hh, i, t: (bb, hh, i, 0)),
        out_shape=out_shape,
        scratch_shapes=[pltpu.VMEM((bq, 1), jnp.float32), pltpu.VMEM((bq, dv), jnp.float32)],
        compiler_params=pltpu.CompilerParams(dimension_semantics=("parallel", "parallel", "parallel", "arbitrary")),
    )(q, k, v, cq, ck)
