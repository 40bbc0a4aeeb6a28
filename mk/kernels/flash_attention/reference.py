"""The plain-JAX reference of :mod:`mk.kernels.flash_attention`: ``softmax(q k^T * scale + bias [causal]) v``."""

from __future__ import annotations

from typing import Any

import jax
import jax.numpy as jnp


def attention(q: Any, k: Any, v: Any, bias: Any = None, *, scale: float, causal: bool = False) -> Any:
    """q (B, H, Sq, D), k/v (B, Hkv, Sk, D) with H a multiple of Hkv (query head h reads kv head h // (H // Hkv)),
    bias broadcastable to (B, H, Sq, Sk); the causal mask keeps key j for query i when j <= i. Math in f32."""
    group = q.shape[1] // k.shape[1]
    k, v = jnp.repeat(k, group, axis=1), jnp.repeat(v, group, axis=1)
    s = jnp.einsum("bhqd,bhkd->bhqk", q.astype(jnp.float32), k.astype(jnp.float32)) * scale
    if bias is not None:
        s = s + bias.astype(jnp.float32)
    if causal:
        s = jnp.where(jnp.tril(jnp.ones(s.shape[-2:], bool)), s, -1e30)
    return jnp.einsum("bhqk,bhkd->bhqd", jax.nn.softmax(s, axis=-1), v.astype(jnp.float32)).astype(q.dtype)
