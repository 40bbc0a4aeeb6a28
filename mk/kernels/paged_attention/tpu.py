"""Paged decode attention on TPU (Mosaic): one query token per sequence, keys and values read through a page table.

q (N, Hq, D), k/v_pages (P, page, Hkv, D), lengths (N,), page_indices
(N, pages). The page table and the lengths are scalar-prefetch operands
(SMEM): the BlockSpec index maps read them, so each grid step (sequence n,
page block j) DMAs exactly the ``pages_per_block`` pages it needs, straight
from the cache (no gather in HBM). Pages past a sequence's length are skipped
and their index maps repeat the last page needed (nothing new is fetched).
The pages are viewed as (P, page, Hkv * D) (a free reshape) so a kv head is
a lane slice; each kv head's group of query heads keeps its running max, sum
and f32 accumulator in VMEM scratch across the page blocks (the grid's last,
"arbitrary" axis). ``score_dtype`` rounds the f32 scores as a 16-bit reference
rounds its ``q . k`` products and their scaling.

Self-contained (jax only): mk's offline author copies it verbatim into the
kernels it writes.
"""

import functools

import jax
import jax.numpy as jnp
from jax import lax
from jax.experimental import pallas as pl
from jax.experimental.pallas import tpu as pltpu

_MASKED = -1e30


def _paged_tpu_kernel(lengths_ref, pages_ref, q_ref, *refs, scale, score_dtype, page, pages_per_block, kv_heads,
                      head_dim, n_blocks):
    k_refs, v_refs = refs[:pages_per_block], refs[pages_per_block:2 * pages_per_block]
    o_ref, m_ref, l_ref, acc_ref = refs[2 * pages_per_block:]
    n, j = pl.program_id(0), pl.program_id(1)
    length = lengths_ref[n]
    group = q_ref.shape[1] // kv_heads

    @pl.when(j == 0)
    def _init():
        m_ref[...] = jnp.full(m_ref.shape, _MASKED, jnp.float32)
        l_ref[...] = jnp.zeros(l_ref.shape, jnp.float32)
        acc_ref[...] = jnp.zeros(acc_ref.shape, jnp.float32)

    for u in range(pages_per_block):
        start = (j * pages_per_block + u) * page

        @pl.when(start < length)
        def _page(u=u, start=start):
            for g in range(kv_heads):
                rows = slice(g * group, (g + 1) * group)
                lanes = slice(g * head_dim, (g + 1) * head_dim)
                q = q_ref[0, rows, :]
                k = k_refs[u][0, :, lanes]
                v = v_refs[u][0, :, lanes]
                s = lax.dot_general(q, k, (((1,), (1,)), ((), ())), preferred_element_type=jnp.float32)
                s = s * scale if score_dtype is None else (s.astype(score_dtype) * scale).astype(jnp.float32)
                t = start + lax.broadcasted_iota(jnp.int32, s.shape, 1)
                s = jnp.where(t < length, s, _MASKED)
                m_prev = m_ref[rows, :]
                m_new = jnp.maximum(m_prev, jnp.max(s, axis=1, keepdims=True))
                alpha = jnp.exp(m_prev - m_new)
                p = jnp.exp(s - m_new)
                l_ref[rows, :] = alpha * l_ref[rows, :] + jnp.sum(p, axis=1, keepdims=True)
                acc_ref[rows, :] = alpha * acc_ref[rows, :] + lax.dot_general(
                    p.astype(v.dtype), v, (((1,), (0,)), ((), ())), preferred_element_type=jnp.float32)
                m_ref[rows, :] = m_new

    @pl.when(j == n_blocks - 1)
    def _done():
        l = l_ref[...]
        o_ref[0] = jnp.where(l > 0, acc_ref[...] / jnp.where(l > 0, l, 1.0), 0.0).astype(o_ref.dtype)  # empty: 0


def _largest_divisor(n, want):
    for b in range(max(1, min(want, n)), 0, -1):
        if n % b == 0:
            return b
    return 1


def paged_attention_tpu(q, k_pages, v_pages, lengths, page_indices, *, scale, score_dtype=None, pages_per_block=8):
    """Decode attention of q (N, Hq, D) over the first lengths[n] slots of sequence n's pages (module docstring).
    A sequence of length 0 has no keys: its output is NaN (0 / 0)."""
    n, hq, d = q.shape
    total, page, kv_heads, kd = k_pages.shape
    if v_pages.shape != k_pages.shape or kd != d or hq % kv_heads or page_indices.shape[0] != n \
            or lengths.shape != (n,):
        raise ValueError(f"expected q (N, Hq, D), k/v_pages (P, page, Hkv, D), lengths (N,), page_indices (N, pages), "
                         f"got {q.shape=}, {k_pages.shape=}, {v_pages.shape=}, {lengths.shape=}, {page_indices.shape=}")
    pages = page_indices.shape[1]
    ppb = _largest_divisor(pages, pages_per_block)
    n_blocks = pages // ppb
    flat = page_indices.reshape(-1).astype(jnp.int32)
    lengths = lengths.astype(jnp.int32)
    kf, vf = k_pages.reshape(total, page, kv_heads * d), v_pages.reshape(total, page, kv_heads * d)

    def page_map(u):
        def imap(s, j, lens, table):
            last = jnp.maximum(lens[s] - 1, 0) // page  # past the length: repeat the last page needed
            return table[s * pages + jnp.minimum(j * ppb + u, last)], 0, 0
        return imap

    kv_specs = [pl.BlockSpec((1, page, kv_heads * d), page_map(u)) for u in range(ppb)]
    grid_spec = pltpu.PrefetchScalarGridSpec(
        num_scalar_prefetch=2,
        grid=(n, n_blocks),
        in_specs=[pl.BlockSpec((1, hq, d), lambda s, j, lens, table: (s, 0, 0)), *kv_specs, *kv_specs],
        out_specs=pl.BlockSpec((1, hq, d), lambda s, j, lens, table: (s, 0, 0)),
        scratch_shapes=[pltpu.VMEM((hq, 1), jnp.float32), pltpu.VMEM((hq, 1), jnp.float32),
                        pltpu.VMEM((hq, d), jnp.float32)],
    )
    return pl.pallas_call(
        functools.partial(_paged_tpu_kernel, scale=scale, score_dtype=score_dtype, page=page, pages_per_block=ppb,
                          kv_heads=kv_heads, head_dim=d, n_blocks=n_blocks),
        grid_spec=grid_spec,
        out_shape=jax.ShapeDtypeStruct(q.shape, q.dtype),
        compiler_params=pltpu.CompilerParams(dimension_semantics=("parallel", "arbitrary")),
    )(lengths, flat, q, *([kf] * ppb), *([vf] * ppb))
