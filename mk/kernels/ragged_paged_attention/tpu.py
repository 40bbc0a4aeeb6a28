"""Ragged paged attention on TPU (Mosaic): a batch mixing decode tokens and prefill chunks, keys and values read
through a page table from a cache with combined K/V heads.

queries (T, Hq, D); kv_pages (P, page, 2*Hkv, D) with combined head 2g the K
and 2g+1 the V of kv head g; kv_lens (S,), page_indices (S, pages),
cu_q_lens (S + 1,), num_seqs (1,). Semantics: :mod:`.reference`.

The grid is (token block, kv head), both parallel: a program owns ``block_q``
query rows and one kv head, so it writes its output block once. Its queries
are that kv head's group of query heads for the block's tokens, arranged in
XLA as one (block_q * group, D) matrix (row = token * group + head), so
every product is one MXU matmul. Small integer prep in XLA finds, per token
block, the range of sequences that overlap it; it is scalar-prefetched with
cu_q_lens, kv_lens and the flat page table. The kernel loops (dynamic
``fori_loop``) over those sequences and, per sequence, over only the pages its
rows in this block can see (up to kv_len, and no further than the causal
limit of the block's last row), ``pages_per_block`` pages at a time: each page's
(page, D) K and V slices of the kv head (combined heads 2g and 2g + 1, lane
slices of the pages viewed as (P, page, 2 * Hkv * D), as the paged_attention
family views its pages) are copied from the cache in HBM
(``memory_space=ANY``) by manual DMAs, double-buffered (the next page block is fetched while this one is
computed). Page slots past the last needed page repeat it (masked), so no page
past a sequence's length is read. The online softmax (running max, sum and f32
accumulator) lives in VMEM scratch; a row only takes the scores of its own
sequence (row and causal masks), rows no active sequence owns stay 0. The
probabilities are cast to the values' dtype before the value product.

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


def _rpa_tpu_kernel(lo_ref, hi_ref, cu_ref, lens_ref, table_ref, q_ref, kv_hbm, o_ref, k_buf, v_buf, sem, m_ref,
                    l_ref, acc_ref, *, scale, page, pages, pages_per_block, group, block_q, head_dim):
    b, g = pl.program_id(0), pl.program_id(1)
    rows = q_ref.shape[0]
    ppb, kblk = pages_per_block, pages_per_block * page
    row_tok = b * block_q + lax.broadcasted_iota(jnp.int32, (rows, 1), 0) // group
    m_ref[...] = jnp.full(m_ref.shape, _MASKED, jnp.float32)
    l_ref[...] = jnp.zeros(l_ref.shape, jnp.float32)
    acc_ref[...] = jnp.zeros(acc_ref.shape, jnp.float32)

    def seq_body(i, carry):
        q_start, q_end = cu_ref[i], cu_ref[i + 1]
        q_len, kv_len = q_end - q_start, lens_ref[i]
        last_row = jnp.minimum(q_end, (b + 1) * block_q) - 1 - q_start  # this block's last row of the sequence
        needed = jnp.maximum(jnp.minimum(kv_len, kv_len - q_len + last_row + 1), 0)
        n_pages = jnp.minimum((needed + page - 1) // page, pages)
        n_blocks = (n_pages + ppb - 1) // ppb
        valid = jnp.minimum(kv_len, n_pages * page)  # slots [0, valid): real, within the table, copied once

        def copies(blk, slot):
            out = []
            for u in range(ppb):
                local = jnp.minimum(blk * ppb + u, n_pages - 1)  # past the last needed page: repeat it
                p_id = table_ref[i * pages + local]
                k_src = kv_hbm.at[p_id, :, pl.ds(2 * g * head_dim, head_dim)]  # combined head 2g: lanes
                v_src = kv_hbm.at[p_id, :, pl.ds((2 * g + 1) * head_dim, head_dim)]
                out.append(pltpu.make_async_copy(k_src, k_buf.at[slot, u], sem.at[slot]))
                out.append(pltpu.make_async_copy(v_src, v_buf.at[slot, u], sem.at[slot]))
            return out

        @pl.when(n_blocks > 0)
        def _first():
            for c in copies(0, 0):
                c.start()

        def kv_body(blk, carry):
            slot = blk % 2

            @pl.when(blk + 1 < n_blocks)
            def _next():
                for c in copies(blk + 1, 1 - slot):
                    c.start()

            for c in copies(blk, slot):
                c.wait()
            k = k_buf[slot].reshape(kblk, head_dim)  # (ppb, page, D) -> (ppb * page, D)
            v = v_buf[slot].reshape(kblk, head_dim)
            q = q_ref[...]
            s = lax.dot_general(q, k, (((1,), (1,)), ((), ())), preferred_element_type=jnp.float32) * scale
            t = blk * kblk + lax.broadcasted_iota(jnp.int32, s.shape, 1)
            r = row_tok - q_start
            own = (row_tok >= q_start) & (row_tok < q_end)  # this block's rows of sequence i
            # slots past kv_len, past the table (a kv_len beyond it), or repeats of the last page are never attended
            ok = own & (t < valid) & (t <= kv_len - q_len + r)
            s = jnp.where(ok, s, _MASKED)
            m_prev = m_ref[...]
            m_new = jnp.maximum(m_prev, jnp.max(s, axis=1, keepdims=True))
            alpha = jnp.exp(m_prev - m_new)
            p = jnp.where(ok, jnp.exp(s - m_new), 0.0)
            l_ref[...] = alpha * l_ref[...] + jnp.sum(p, axis=1, keepdims=True)
            vt = blk * kblk + lax.broadcasted_iota(jnp.int32, v.shape, 0)
            v = jnp.where(vt < valid, v, jnp.zeros_like(v))  # 0 * NaN of an unwritten slot would still be NaN
            pv = lax.dot_general(p.astype(v.dtype), v, (((1,), (0,)), ((), ())), preferred_element_type=jnp.float32)
            acc_ref[...] = alpha * acc_ref[...] + jnp.where(own, pv, 0.0)  # other sequences' rows untouched
            m_ref[...] = m_new
            return carry

        lax.fori_loop(0, n_blocks, kv_body, 0)
        return carry

    lax.fori_loop(lo_ref[b], hi_ref[b], seq_body, 0)
    l = l_ref[...]
    o_ref[...] = jnp.where(l > 0, acc_ref[...] / jnp.where(l > 0, l, 1.0), 0.0).astype(o_ref.dtype)


def seq_ranges(cu_q_lens, num_seqs, n_blocks, block_q):
    """Per token block b (rows [b * block_q, (b + 1) * block_q)): the active sequences [lo[b], hi[b]) whose rows
    overlap it (cu_q_lens is non-decreasing)."""
    cu = cu_q_lens.astype(jnp.int32)
    active = jnp.arange(cu.shape[0] - 1) < num_seqs.reshape(-1)[0]
    start = jnp.arange(n_blocks, dtype=jnp.int32)[:, None] * block_q
    lo = jnp.sum(active[None, :] & (cu[None, 1:] <= start), axis=1)
    hi = jnp.sum(active[None, :] & (cu[None, :-1] < start + block_q), axis=1)
    return lo.astype(jnp.int32), jnp.maximum(hi, lo).astype(jnp.int32)


def ragged_paged_attention_tpu(queries, kv_pages, kv_lens, page_indices, cu_q_lens, num_seqs, *, scale, block_q=32,
                               pages_per_block=8, vmem_limit_bytes=None):
    """Ragged paged attention (module docstring): the (T, Hq, D) output, rows no active sequence owns 0."""
    t_rows, hq, d = queries.shape
    total, page, combined, kd = kv_pages.shape
    n_seqs, pages = page_indices.shape
    if combined % 2 or kd != d or hq % (combined // 2) or kv_lens.shape != (n_seqs,) \
            or cu_q_lens.shape != (n_seqs + 1,):
        raise ValueError(f"expected queries (T, Hq, D), kv_pages (P, page, 2*Hkv, D), kv_lens (S,), page_indices "
                         f"(S, pages), cu_q_lens (S + 1,), got {queries.shape=}, {kv_pages.shape=}, "
                         f"{kv_lens.shape=}, {page_indices.shape=}, {cu_q_lens.shape=}")
    hkv = combined // 2
    group = hq // hkv
    bq = max(1, min(block_q, t_rows))
    while (bq * group) % 8:  # the query block's rows fill whole sublane tiles
        bq += 1
    n_blocks = -(-t_rows // bq)
    t_pad = n_blocks * bq
    ppb = max(1, min(pages_per_block, pages))
    lo, hi = seq_ranges(cu_q_lens, num_seqs, n_blocks, bq)
    q = jnp.pad(queries, ((0, t_pad - t_rows), (0, 0), (0, 0)))
    q = q.reshape(t_pad, hkv, group, d).transpose(1, 0, 2, 3).reshape(hkv, t_pad * group, d)
    kv = kv_pages.reshape(total, page, combined * d)  # a combined head is a lane slice: tile-aligned page DMAs
    rows = bq * group
    grid_spec = pltpu.PrefetchScalarGridSpec(
        num_scalar_prefetch=5,
        grid=(n_blocks, hkv),
        in_specs=[pl.BlockSpec((None, rows, d), lambda b, g, *_: (g, b, 0)),
                  pl.BlockSpec(memory_space=pl.ANY)],
        out_specs=pl.BlockSpec((None, rows, d), lambda b, g, *_: (g, b, 0)),
        scratch_shapes=[pltpu.VMEM((2, ppb, page, d), kv_pages.dtype), pltpu.VMEM((2, ppb, page, d), kv_pages.dtype),
                        pltpu.SemaphoreType.DMA((2,)),
                        pltpu.VMEM((rows, 1), jnp.float32), pltpu.VMEM((rows, 1), jnp.float32),
                        pltpu.VMEM((rows, d), jnp.float32)],
    )
    out = pl.pallas_call(
        functools.partial(_rpa_tpu_kernel, scale=scale, page=page, pages=pages, pages_per_block=ppb, group=group,
                          block_q=bq, head_dim=d),
        grid_spec=grid_spec,
        out_shape=jax.ShapeDtypeStruct((hkv, t_pad * group, d), queries.dtype),
        compiler_params=pltpu.CompilerParams(dimension_semantics=("parallel", "parallel"),
                                             vmem_limit_bytes=vmem_limit_bytes),
    )(lo, hi, cu_q_lens.astype(jnp.int32), kv_lens.astype(jnp.int32), page_indices.reshape(-1).astype(jnp.int32),
      q, kv)
    return out.reshape(hkv, t_pad, group, d).transpose(1, 0, 2, 3).reshape(t_pad, hq, d)[:t_rows]
