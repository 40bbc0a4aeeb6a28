"""The plain-JAX reference of :mod:`mk.kernels.conv`: what the kernels compute, written with XLA's convolution."""

from __future__ import annotations

from typing import Any, Callable

import jax.numpy as jnp
from jax import lax

_SPECS = {1: ("NWC", "WIO", "NWC"), 2: ("NHWC", "HWIO", "NHWC"), 3: ("NDHWC", "DHWIO", "NDHWC")}


def conv(x: Any, w: Any, *params: Any, epilogue: Callable[..., Any] | None = None, bias: Any = None,
         precision: Any = None) -> Any:
    """``epilogue(conv(x, w) + bias, *params)``: stride 1, VALID, channels last (x (N, *S, Cin), w (*K, Cin, Cout))."""
    s = x.ndim - 2
    y = lax.conv_general_dilated(x, w, (1,) * s, "VALID", dimension_numbers=_SPECS[s], precision=precision,
                                 preferred_element_type=jnp.float32)
    if bias is not None:
        y = y + bias
    return y if epilogue is None else epilogue(y, *params)
