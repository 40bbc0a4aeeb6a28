"""The plain-JAX reference of :mod:`mk.kernels.gmm`: a grouped matmul over contiguous row groups."""

from __future__ import annotations

from typing import Any

import jax.numpy as jnp


def gmm(lhs: Any, rhs: Any, group_sizes: Any, out_dtype: Any = None) -> Any:
    """Rows ``[start_g, start_g + group_sizes[g])`` of ``lhs`` (M, K), in group order from row 0, times ``rhs[g]``
    (K, N); rows past ``sum(group_sizes)`` are zero. One masked product per group (a reference, not fast)."""
    ends = jnp.cumsum(group_sizes)
    rows = jnp.arange(lhs.shape[0])
    out = jnp.zeros((lhs.shape[0], rhs.shape[2]), jnp.float32)
    for g in range(rhs.shape[0]):
        mine = (rows >= ends[g] - group_sizes[g]) & (rows < ends[g])
        out += jnp.where(mine[:, None], jnp.dot(lhs, rhs[g], preferred_element_type=jnp.float32), 0.0)
    return out.astype(out_dtype or lhs.dtype)
