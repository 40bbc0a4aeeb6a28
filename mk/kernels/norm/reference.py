"""The plain-JAX reference of :mod:`mk.kernels.norm`: RMSNorm, LayerNorm and softmax over the last axis, and the
norms' VJPs."""

from __future__ import annotations

from typing import Any

import jax
import jax.numpy as jnp


def rmsnorm(x: Any, w: Any | None, eps: float) -> Any:
    """``x * rsqrt(mean(x^2) + eps) * w`` over the last axis, f32 statistics, output in x's dtype."""
    xf = x.astype(jnp.float32)
    y = xf * jax.lax.rsqrt(jnp.mean(xf * xf, axis=-1, keepdims=True) + eps)
    if w is not None:
        y = y * w.astype(jnp.float32)
    return y.astype(x.dtype)


def layernorm(x: Any, w: Any | None, b: Any | None, eps: float) -> Any:
    """``(x - mean) * rsqrt(var + eps) * w + b`` over the last axis, f32 statistics, output in x's dtype."""
    xf = x.astype(jnp.float32)
    mu = jnp.mean(xf, axis=-1, keepdims=True)
    xc = xf - mu
    y = xc * jax.lax.rsqrt(jnp.mean(xc * xc, axis=-1, keepdims=True) + eps)
    if w is not None:
        y = y * w.astype(jnp.float32)
    if b is not None:
        y = y + b.astype(jnp.float32)
    return y.astype(x.dtype)


def softmax(x: Any) -> Any:
    """``exp(x - max) / sum(exp(x - max))`` over the last axis, f32 math, output in x's dtype."""
    return jax.nn.softmax(x.astype(jnp.float32), axis=-1).astype(x.dtype)


def two_pass(x: Any, w: Any | None, b: Any | None, *, kind: str, eps: float = 0.0) -> Any:
    """What the two-pass kernels compute: :func:`softmax` (``kind="softmax"``, no w or b), :func:`rmsnorm` or
    :func:`layernorm`."""
    if kind == "softmax":
        return softmax(x)
    return rmsnorm(x, w, eps) if kind == "rms" else layernorm(x, w, b, eps)


def rmsnorm_bwd(x: Any, w: Any | None, g: Any, eps: float) -> tuple[Any, Any]:
    """(dx, dw) of :func:`rmsnorm` for the output cotangent ``g`` (dw None without a weight)."""
    if w is None:
        return jax.vjp(lambda a: rmsnorm(a, None, eps), x)[1](g)[0], None
    return jax.vjp(lambda a, b: rmsnorm(a, b, eps), x, w)[1](g)


def layernorm_bwd(x: Any, w: Any | None, b: Any | None, g: Any, eps: float) -> tuple[Any, Any, Any]:
    """(dx, dw, db) of :func:`layernorm` (None for an absent weight or bias)."""
    args = [a for a in (x, w, b) if a is not None]

    def f(*a: Any) -> Any:
        it = iter(a)
        xx = next(it)
        ww = next(it) if w is not None else None
        bb = next(it) if b is not None else None
        return layernorm(xx, ww, bb, eps)

    grads = list(jax.vjp(f, *args)[1](g))
    dx = grads.pop(0)
    dw = grads.pop(0) if w is not None else None
    db = grads.pop(0) if b is not None else None
    return dx, dw, db
