"""Convolutions as implicit GEMM with a fused epilogue (stride 1, VALID, channels last, 1-3 spatial axes).

``reference.py`` is the plain-JAX computation, ``tpu.py`` the Mosaic kernel,
``gpu.py`` the Triton kernel, ``config.py`` the typed tiling with its per-chip
default and tuning space. :func:`conv` picks the kernel for a target and
fills in the default tiling.
"""

from __future__ import annotations

from typing import Any, Callable

import numpy as np

from mk.kernels.conv.config import Config, Shapes, default, space
from mk.kernels.conv.gpu import conv_gpu
from mk.kernels.conv.reference import conv as reference
from mk.kernels.conv.tpu import conv_tpu
from mk.targets import kernel_language, kernel_spec


def conv(x: Any, w: Any, *params: Any, target: str, epilogue: Callable[..., Any] | None = None, bias: Any = None,
         config: Config | None = None, chip: str | None = None, **kernel_kwargs: Any) -> Any:
    """``epilogue(conv(x, w) + bias, *params)`` with the ``target`` kernel (``tpu`` or ``gpu``)."""
    spec = kernel_spec(target)  # the target's hardware spec; a TargetError for a target with no kernels
    shapes = Shapes.of(tuple(x.shape), tuple(w.shape), np.dtype(x.dtype).itemsize, epilogue is not None)
    config = config or default(chip or spec, shapes)
    config.check(target, shapes)
    fn = conv_tpu if kernel_language(target) == "mosaic" else conv_gpu
    return fn(x, w, *params, epilogue=epilogue, bias=bias, **config.kwargs(target), **kernel_kwargs)


__all__ = ["Config", "Shapes", "conv", "conv_gpu", "conv_tpu", "default", "reference", "space"]
