"""The plain-JAX reference of :mod:`mk.kernels.matmul`: ``epilogue(x @ w, *params)``, the product in f32."""

from __future__ import annotations

from typing import Any, Callable

import jax.numpy as jnp
from jax import lax


def matmul(x: Any, w: Any, *params: Any, epilogue: Callable[..., Any] | None = None, transpose_w: bool = False,
           product_dtype: Any = None, precision: Any = None) -> Any:
    """``epilogue(x @ w, *params)`` for x (M, K) and w (K, N) (or (N, K) with ``transpose_w``); the product is
    accumulated in f32 and cast to ``product_dtype`` (the inputs' result type by default) before the epilogue."""
    dims = (((1,), (1 if transpose_w else 0,)), ((), ()))
    acc = lax.dot_general(x, w, dims, precision=precision, preferred_element_type=jnp.float32)
    acc = acc.astype(product_dtype or jnp.result_type(x.dtype, w.dtype))
    return acc if epilogue is None else epilogue(acc, *params)
