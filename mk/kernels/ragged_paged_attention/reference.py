"""The plain-JAX reference of :mod:`mk.kernels.ragged_paged_attention`: ragged (mixed prefill and decode) attention
over a paged KV cache with combined K/V heads."""

from __future__ import annotations

from typing import Any

import jax
import jax.numpy as jnp


def ragged_paged_attention(queries: Any, kv_pages: Any, kv_lens: Any, page_indices: Any, cu_q_lens: Any,
                           num_seqs: Any, *, scale: float, p_dtype: Any = None) -> Any:
    """queries (T, Hq, D); kv_pages (P, page, 2*Hkv, D), combined head 2g is K and 2g+1 is V of kv head g;
    kv_lens (S,), page_indices (S, pages), cu_q_lens (S + 1,), num_seqs (1,) int.

    Token row j belongs to the sequence i < num_seqs[0] with cu_q_lens[i] <= j < cu_q_lens[i + 1]; with
    q_len = cu_q_lens[i + 1] - cu_q_lens[i], r = j - cu_q_lens[i] and kv_len = kv_lens[i], it attends to the
    kv slots t < kv_len with t <= kv_len - q_len + r (slot t = local page * page + offset over page_indices[i]);
    query head h reads kv head h // (Hq // Hkv). Scores in f32 times ``scale``, softmax in f32, the
    probabilities cast to ``p_dtype`` (the queries' dtype when None) before the value product. Rows no active
    sequence owns, and rows with no slot to attend to, are 0; slots no row attends to never reach the output (NaN or
    Inf in an unwritten part of the cache stays out)."""
    t_rows, hq, d = queries.shape
    n_seqs, pages = page_indices.shape
    page = kv_pages.shape[1]
    hkv = kv_pages.shape[2] // 2
    p_dtype = queries.dtype if p_dtype is None else p_dtype
    cu = cu_q_lens.astype(jnp.int32)
    j = jnp.arange(t_rows)
    seq = jnp.arange(n_seqs)
    active = seq < num_seqs[0]
    own = active[None, :] & (cu[None, :-1] <= j[:, None]) & (j[:, None] < cu[None, 1:])  # (T, S)
    owned = jnp.any(own, axis=1)
    sid = jnp.argmax(own, axis=1)
    q_len = (cu[1:] - cu[:-1])[sid]
    kv_len = kv_lens.astype(jnp.int32)[sid]
    r = j - cu[:-1][sid]
    kv = kv_pages[page_indices].reshape(n_seqs, pages * page, 2 * hkv, d)  # (S, slots, 2Hkv, D)
    k, v = kv[sid, :, 0::2], kv[sid, :, 1::2]  # (T, slots, Hkv, D)
    qg = queries.reshape(t_rows, hkv, hq // hkv, d)
    s = jnp.einsum("tgrd,tsgd->tgrs", qg, k, preferred_element_type=jnp.float32) * scale
    slot = jnp.arange(pages * page)[None, :]
    ok = (slot < kv_len[:, None]) & (slot <= (kv_len - q_len + r)[:, None]) & owned[:, None]  # (T, slots)
    s = jnp.where(ok[:, None, None, :], s, -jnp.inf)
    m = jnp.max(s, axis=-1, keepdims=True)
    e = jnp.where(ok[:, None, None, :], jnp.exp(s - jnp.where(jnp.isfinite(m), m, 0.0)), 0.0)
    den = jnp.sum(e, axis=-1, keepdims=True)
    p = (e / jnp.where(den > 0, den, 1.0)).astype(p_dtype)
    v = jnp.where(ok[:, :, None, None], v, jnp.zeros_like(v))  # unattended slots are never read (an unwritten cache)
    o = jnp.einsum("tgrs,tsgd->tgrd", p, v.astype(p_dtype), preferred_element_type=jnp.float32)
    return o.reshape(t_rows, hq, d).astype(queries.dtype)
