"""The plain-JAX reference of :mod:`mk.kernels.swiglu`: a gated MLP, ``(act(x @ wg, x @ wu)) @ wd``."""

from __future__ import annotations

from typing import Any, Callable

import jax
import jax.numpy as jnp


def silu_gate(g: Any, u: Any) -> Any:
    """SwiGLU's gate: ``silu(g) * u``."""
    return jax.nn.silu(g) * u


def swiglu(x: Any, wg: Any, wu: Any, wd: Any, activation: Callable[..., Any] = silu_gate, *, halves: bool = False,
           up_t: bool = False, down_t: bool = False, hidden_sides: tuple[Any, ...] = (),
           out_sides: tuple[Any, ...] = (), epilogue: Callable[..., Any] | None = None) -> Any:
    """``activation(x @ wg, x @ wu) @ wd`` over the last axis of ``x``; products in the inputs' dtype. The kernels'
    other MLPs: ``wu=None`` (ungated, ``activation(x @ wg) @ wd``), ``halves`` (wg (E, 2F) holds the gate and up
    weights side by side), ``up_t``/``down_t`` (weights kept as (out, in)), ``hidden_sides`` (vectors the activation
    reads after the products: an up-projection's bias) and ``epilogue(y, *out_sides)`` after the down-projection."""
    w1 = wg.T if up_t else wg
    wdd = wd.T if down_t else wd
    if halves:
        f = w1.shape[1] // 2
        w1, w2 = w1[:, :f], w1[:, f:]
    else:
        w2 = None if wu is None else (wu.T if up_t else wu)
    ups = [jnp.dot(x, w1)] + ([] if w2 is None else [jnp.dot(x, w2)])
    y = jnp.dot(activation(*ups, *hidden_sides), wdd)
    return y if epilogue is None else epilogue(y, *out_sides)
