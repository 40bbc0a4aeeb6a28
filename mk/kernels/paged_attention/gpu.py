"""Paged decode attention on GPU (Pallas Triton): one query token per sequence, keys and values read through a page
table.

The same computation as :mod:`mk.kernels.paged_attention.tpu`. One program
per (sequence, kv head) holds that kv head's group of query heads and loops
(``lax.fori_loop``) over the sequence's pages up to its length only: it reads
the page number from the page table, loads that page's (page, D) slice of the
kv head straight from the cache and updates a running max, sum and f32
accumulator in registers. Decode attention is memory bound and a group is
small, so the products are broadcast multiplies and sums (no tensor-core
minimum size). Triton needs power-of-two shapes: the group, the page and
head_dim are zero-padded when they are not (padded slots masked).

Self-contained (jax only): mk's offline author copies it verbatim into the
kernels it writes.
"""

import functools

import jax
import jax.numpy as jnp
from jax import lax
from jax.experimental import pallas as pl
from jax.experimental.pallas import triton as pltriton

_MASKED = -1e30


def _pow2(n):
    return 1 << max(0, (n - 1).bit_length())


def _paged_gpu_kernel(lengths_ref, pages_ref, q_ref, k_ref, v_ref, o_ref, *, scale, score_dtype, page, page_pad):
    n, g = pl.program_id(0), pl.program_id(1)
    length = lengths_ref[n]
    q = q_ref[...].astype(jnp.float32)  # (group, D)

    def step(j, carry):
        m, l, acc = carry
        p_id = pages_ref[n, j]
        k = k_ref[p_id, :, g, :].astype(jnp.float32)  # (page, D)
        v = v_ref[p_id, :, g, :].astype(jnp.float32)
        s = jnp.sum(q[:, None, :] * k[None, :, :], axis=2)
        s = s * scale if score_dtype is None else (s.astype(score_dtype) * scale).astype(jnp.float32)
        slot = lax.broadcasted_iota(jnp.int32, s.shape, 1)
        s = jnp.where((j * page + slot < length) & (slot < page), s, _MASKED)
        m_new = jnp.maximum(m, jnp.max(s, axis=1))
        alpha = jnp.exp(m - m_new)
        p = jnp.exp(s - m_new[:, None])
        l = alpha * l + jnp.sum(p, axis=1)
        acc = alpha[:, None] * acc + jnp.sum(p[:, :, None] * v[None, :, :], axis=1)
        return m_new, l, acc

    rows, d = q.shape
    carry = (jnp.full((rows,), _MASKED, jnp.float32), jnp.zeros((rows,), jnp.float32), jnp.zeros((rows, d), jnp.float32))
    _, l, acc = lax.fori_loop(0, (length + page - 1) // page, step, carry)
    o_ref[...] = jnp.where(l[:, None] > 0, acc / jnp.where(l > 0, l, 1.0)[:, None], 0.0).astype(o_ref.dtype)  # empty: 0


def paged_attention_gpu(q, k_pages, v_pages, lengths, page_indices, *, scale, score_dtype=None, num_warps=4,
                        num_stages=2):
    """Decode attention of q (N, Hq, D) over the first lengths[n] slots of sequence n's pages (module docstring).
    A sequence of length 0 has no keys: its output is NaN (0 / 0)."""
    n, hq, d = q.shape
    total, page, kv_heads, kd = k_pages.shape
    if v_pages.shape != k_pages.shape or kd != d or hq % kv_heads or page_indices.shape[0] != n \
            or lengths.shape != (n,):
        raise ValueError(f"expected q (N, Hq, D), k/v_pages (P, page, Hkv, D), lengths (N,), page_indices (N, pages), "
                         f"got {q.shape=}, {k_pages.shape=}, {v_pages.shape=}, {lengths.shape=}, {page_indices.shape=}")
    group = hq // kv_heads
    g_pad, p_pad, d_pad = _pow2(group), _pow2(page), _pow2(d)
    qg = jnp.pad(q.reshape(n, kv_heads, group, d), ((0, 0), (0, 0), (0, g_pad - group), (0, d_pad - d)))
    if (p_pad, d_pad) != (page, d):  # copies the cache: only for shapes Triton cannot load
        k_pages, v_pages = (jnp.pad(t, ((0, 0), (0, p_pad - page), (0, 0), (0, d_pad - d))) for t in (k_pages, v_pages))
    out = pl.pallas_call(
        functools.partial(_paged_gpu_kernel, scale=scale, score_dtype=score_dtype, page=page, page_pad=p_pad),
        grid=(n, kv_heads),
        in_specs=[pl.no_block_spec, pl.no_block_spec,
                  pl.BlockSpec((None, None, g_pad, d_pad), lambda s, g: (s, g, 0, 0)),
                  pl.no_block_spec, pl.no_block_spec],
        out_specs=pl.BlockSpec((None, None, g_pad, d_pad), lambda s, g: (s, g, 0, 0)),
        out_shape=jax.ShapeDtypeStruct((n, kv_heads, g_pad, d_pad), q.dtype),
        compiler_params=pltriton.CompilerParams(num_warps=num_warps, num_stages=num_stages),
    )(lengths.astype(jnp.int32), page_indices.astype(jnp.int32), qg, k_pages, v_pages)
    return out[:, :, :group, :d].reshape(n, hq, d)
