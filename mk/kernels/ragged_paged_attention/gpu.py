"""Ragged paged attention on GPU (Pallas Triton): a batch mixing decode tokens and prefill chunks, keys and values
read through a page table from a cache with combined K/V heads.

The same computation as :mod:`mk.kernels.ragged_paged_attention.tpu`. One
program per (token block, kv head) holds that kv head's group of query heads
for ``block_q`` tokens as one (block_q * group, D) matrix (row = token * group
+ head, arranged in XLA) and loops (``lax.fori_loop``) over the sequences that
overlap its tokens (a range found by small integer prep in XLA) and, per
sequence, over only the pages its rows can see (up to kv_len and the causal
limit of the block's last row): it reads the page number from the page table,
loads that page's K and V (page, D) slices of the kv head (combined heads 2g
and 2g + 1) straight from the cache and updates a running max, sum and f32
accumulator in registers, each row taking only the scores of its own sequence.
The probabilities are cast to the values' dtype before the value product.
Triton needs power-of-two shapes: the group, the page and head_dim are
zero-padded when they are not (padded slots and rows masked); products are
matrix products when both sides are at least 16 wide, else broadcast sums.

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


def _rpa_gpu_kernel(lo_ref, hi_ref, cu_ref, lens_ref, table_ref, q_ref, kv_ref, o_ref, *, scale, page, page_pad,
                    pages, group_pad, block_q, use_dot):
    b, g = pl.program_id(0), pl.program_id(1)
    q = q_ref[...]  # (rows, D)
    rows, d = q.shape
    row_tok = b * block_q + lax.broadcasted_iota(jnp.int32, (rows, page_pad), 0) // group_pad
    slot = lax.broadcasted_iota(jnp.int32, (rows, page_pad), 1)
    row_d = b * block_q + lax.broadcasted_iota(jnp.int32, (rows, d), 0) // group_pad
    vslot = lax.broadcasted_iota(jnp.int32, (page_pad, d), 0)

    def seq_body(i, carry):
        q_start, q_end = cu_ref[i], cu_ref[i + 1]
        q_len, kv_len = q_end - q_start, lens_ref[i]
        last_row = jnp.minimum(q_end, (b + 1) * block_q) - 1 - q_start
        needed = jnp.maximum(jnp.minimum(kv_len, kv_len - q_len + last_row + 1), 0)
        n_pages = jnp.minimum((needed + page - 1) // page, pages)  # kv_len past the table: its slots only
        in_seq = (row_tok >= q_start) & (row_tok < q_end)
        own = (row_d >= q_start) & (row_d < q_end)  # the same rows, over the value columns
        limit = jnp.minimum(kv_len, kv_len - q_len + row_tok - q_start + 1)  # slots t < limit are attended

        def page_body(j, carry):
            m, l, acc = carry
            p_id = table_ref[i, j]
            k = kv_ref[p_id, :, g, 0, :]  # (page_pad, D)
            v = kv_ref[p_id, :, g, 1, :]
            if use_dot:
                s = lax.dot_general(q, k, (((1,), (1,)), ((), ())), preferred_element_type=jnp.float32)
            else:
                s = jnp.sum(q.astype(jnp.float32)[:, None, :] * k.astype(jnp.float32)[None, :, :], axis=2)
            s = s * scale
            t = j * page + slot
            ok = in_seq & (t < limit) & (slot < page)
            s = jnp.where(ok, s, _MASKED)
            m_new = jnp.maximum(m, jnp.max(s, axis=1))
            alpha = jnp.exp(m - m_new)
            p = jnp.where(ok, jnp.exp(s - m_new[:, None]), 0.0)
            l = alpha * l + jnp.sum(p, axis=1)
            # slots past kv_len (or padding) are zeroed: 0 * NaN of an unwritten slot would still be NaN
            v = jnp.where((vslot < page) & (j * page + vslot < kv_len), v, jnp.zeros_like(v))
            pv = p.astype(v.dtype)
            if use_dot:
                upd = lax.dot_general(pv, v, (((1,), (0,)), ((), ())), preferred_element_type=jnp.float32)
            else:
                upd = jnp.sum(pv.astype(jnp.float32)[:, :, None] * v.astype(jnp.float32)[None, :, :], axis=1)
            return m_new, l, alpha[:, None] * acc + jnp.where(own, upd, 0.0)  # other sequences' rows untouched

        return lax.fori_loop(0, n_pages, page_body, carry)

    carry = (jnp.full((rows,), _MASKED, jnp.float32), jnp.zeros((rows,), jnp.float32),
             jnp.zeros((rows, d), jnp.float32))
    _, l, acc = lax.fori_loop(lo_ref[b], hi_ref[b], seq_body, carry)
    o_ref[...] = jnp.where(l[:, None] > 0, acc / jnp.where(l > 0, l, 1.0)[:, None], 0.0).astype(o_ref.dtype)


def seq_ranges(cu_q_lens, num_seqs, n_blocks, block_q):
    """Per token block b (rows [b * block_q, (b + 1) * block_q)): the active sequences [lo[b], hi[b]) whose rows
    overlap it (cu_q_lens is non-decreasing)."""
    cu = cu_q_lens.astype(jnp.int32)
    active = jnp.arange(cu.shape[0] - 1) < num_seqs.reshape(-1)[0]
    start = jnp.arange(n_blocks, dtype=jnp.int32)[:, None] * block_q
    lo = jnp.sum(active[None, :] & (cu[None, 1:] <= start), axis=1)
    hi = jnp.sum(active[None, :] & (cu[None, :-1] < start + block_q), axis=1)
    return lo.astype(jnp.int32), jnp.maximum(hi, lo).astype(jnp.int32)


def ragged_paged_attention_gpu(queries, kv_pages, kv_lens, page_indices, cu_q_lens, num_seqs, *, scale, block_q=16,
                               num_warps=4, num_stages=2):
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
    g_pad, p_pad, d_pad = _pow2(group), _pow2(page), _pow2(d)
    bq = _pow2(max(1, min(block_q, t_rows)))
    n_blocks = -(-t_rows // bq)
    t_pad = n_blocks * bq
    rows = bq * g_pad
    lo, hi = seq_ranges(cu_q_lens, num_seqs, n_blocks, bq)
    q = jnp.pad(queries.reshape(t_rows, hkv, group, d), ((0, t_pad - t_rows), (0, 0), (0, g_pad - group),
                                                         (0, d_pad - d)))
    q = q.transpose(1, 0, 2, 3).reshape(hkv, t_pad * g_pad, d_pad)
    kv = kv_pages.reshape(total, page, hkv, 2, d)  # free: combined heads 2g, 2g + 1 are K, V of kv head g
    if (p_pad, d_pad) != (page, d):  # copies the cache: only for shapes Triton cannot load
        kv = jnp.pad(kv, ((0, 0), (0, p_pad - page), (0, 0), (0, 0), (0, d_pad - d)))
    use_dot = rows >= 16 and p_pad >= 16 and d_pad >= 16
    out = pl.pallas_call(
        functools.partial(_rpa_gpu_kernel, scale=scale, page=page, page_pad=p_pad, pages=pages, group_pad=g_pad,
                          block_q=bq, use_dot=use_dot),
        grid=(n_blocks, hkv),
        in_specs=[pl.no_block_spec] * 5 + [pl.BlockSpec((None, rows, d_pad), lambda b, g: (g, b, 0)),
                                           pl.no_block_spec],
        out_specs=pl.BlockSpec((None, rows, d_pad), lambda b, g: (g, b, 0)),
        out_shape=jax.ShapeDtypeStruct((hkv, t_pad * g_pad, d_pad), queries.dtype),
        compiler_params=pltriton.CompilerParams(num_warps=num_warps, num_stages=num_stages),
    )(lo, hi, cu_q_lens.astype(jnp.int32), kv_lens.astype(jnp.int32), page_indices.astype(jnp.int32), q, kv)
    out = out.reshape(hkv, t_pad, g_pad, d_pad).transpose(1, 0, 2, 3)[:t_rows, :, :group, :d]
    return out.reshape(t_rows, hq, d)
