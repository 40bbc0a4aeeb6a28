"""The plain-JAX reference of :mod:`mk.kernels.paged_attention`: decode attention over a page table."""

from __future__ import annotations

from typing import Any

import jax
import jax.numpy as jnp


def paged_attention(q: Any, k_pages: Any, v_pages: Any, lengths: Any, page_indices: Any, *, scale: float) -> Any:
    """q (N, Hq, D): one query token per sequence; k/v_pages (P, page, Hkv, D); lengths (N,): the sequence's keys
    are its first lengths[n] slots of pages page_indices[n] (N, pages) in order (slot t = local page * page + offset).
    Query head h reads kv head h // (Hq // Hkv). Math in f32."""
    n, hq, d = q.shape
    hkv = k_pages.shape[2]
    k = k_pages[page_indices].reshape(n, -1, hkv, d).astype(jnp.float32)
    v = v_pages[page_indices].reshape(n, -1, hkv, d).astype(jnp.float32)
    qg = q.reshape(n, hkv, hq // hkv, d).astype(jnp.float32)
    s = jnp.einsum("ngrd,ntgd->ngrt", qg, k) * scale
    s = jnp.where(jnp.arange(k.shape[1])[None, None, None, :] < lengths[:, None, None, None], s, -1e30)
    out = jnp.einsum("ngrt,ntgd->ngrd", jax.nn.softmax(s, axis=-1), v)
    return out.reshape(n, hq, d).astype(q.dtype)
