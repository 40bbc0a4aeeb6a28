"""The plain-JAX reference of :mod:`mk.kernels.retention`: causal decayed scores, a row normaliser, a value product."""

from __future__ import annotations

from typing import Any

import jax.numpy as jnp


def abs_norm(s: Any) -> Any:
    """RetNet's row statistic: the sum of |score| (the default ``pre``)."""
    return jnp.abs(s)


def clamp_one(den: Any) -> Any:
    """The divisor from a row sum: ``max(|sum|, 1)`` (the default ``post``)."""
    return jnp.maximum(jnp.abs(den), 1.0)


def retention(q: Any, k: Any, v: Any, c: Any, pre: Any = None, post: Any = None, pv_dtype: Any = None) -> Any:
    """``out[i] = sum_{j<=i} cast(s_ij / post(sum_j pre(s_ij)), pv_dtype) v_j`` with ``s_ij = (q_i . k_j)
    exp(c_i - c_j)``; q/k/v (B, H, S, D), ``c`` (B, H, S) f32, the cumulative log decay. Quadratic (a reference)."""
    pre, post = pre or abs_norm, post or clamp_one
    s_len = q.shape[2]
    causal = jnp.arange(s_len)[:, None] >= jnp.arange(s_len)[None, :]
    dec = jnp.exp(jnp.where(causal, c[..., :, None] - c[..., None, :], -jnp.inf))
    s = jnp.einsum("bhsd,bhtd->bhst", q, k, preferred_element_type=jnp.float32) * dec
    p = s / post(jnp.sum(pre(s), axis=-1, keepdims=True))
    out = jnp.einsum("bhst,bhtd->bhsd", p.astype(pv_dtype or v.dtype), v, preferred_element_type=jnp.float32)
    return out.astype(v.dtype)
