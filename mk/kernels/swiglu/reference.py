"""The plain-JAX reference of :mod:`mk.kernels.swiglu`: a gated MLP, ``(act(x @ wg, x @ wu)) @ wd``."""

from __future__ import annotations

from typing import Any, Callable

import jax
import jax.numpy as jnp


def silu_gate(g: Any, u: Any) -> Any:
    """SwiGLU's gate: ``silu(g) * u``."""
    return jax.nn.silu(g) * u


def swiglu(x: Any, wg: Any, wu: Any, wd: Any, activation: Callable[[Any, Any], Any] = silu_gate) -> Any:
    """``activation(x @ wg, x @ wu) @ wd`` over the last axis of ``x``; products in the inputs' dtype."""
    return jnp.dot(activation(jnp.dot(x, wg), jnp.dot(x, wu)), wd)
