"""The plain-JAX reference of :mod:`mk.kernels.cross_entropy`: LM-head cross-entropy per token and its VJP."""

from __future__ import annotations

from typing import Any

import jax
import jax.numpy as jnp


def per_token_loss(x: Any, w: Any, labels: Any, logits_dtype: Any = None) -> Any:
    """``lse(x @ w) - (x @ w)[label]`` per token, f32: x (T, H), w (H, V), labels (T,) int; the logits rounded to
    ``logits_dtype`` (x's dtype by default) like ``jnp.dot``'s."""
    logits = jnp.dot(x, w, preferred_element_type=jnp.float32).astype(logits_dtype or x.dtype).astype(jnp.float32)
    lse = jax.nn.logsumexp(logits, axis=-1)
    return lse - jnp.take_along_axis(logits, labels[:, None].astype(jnp.int32), axis=-1)[:, 0]


def ce_bwd(x: Any, w: Any, labels: Any, c: Any, logits_dtype: Any = None) -> tuple[Any, Any]:
    """(dx, dw) of ``sum(c * per_token_loss(x, w, labels))`` for per-token cotangents ``c`` (T,)."""
    return jax.vjp(lambda a, b: per_token_loss(a, b, labels, logits_dtype), x, w)[1](c.astype(jnp.float32))
