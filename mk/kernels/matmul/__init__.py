"""Tiled matmul with a fused epilogue: ``epilogue(x @ w, *params)``, and its split-K form.

``reference.py`` is the plain-JAX computation, ``tpu.py`` the Mosaic kernel
(K over the grid's last axis into an f32 VMEM accumulator; whole rows when the
epilogue reduces along N), ``gpu.py`` the Triton kernel (a K loop inside the
kernel on power-of-two blocks, sizes zero-padded), ``splitk_tpu.py`` and
``splitk_gpu.py`` the split-K kernels (f32 partial products over K slabs in
parallel; XLA sums them and runs the epilogue), ``config.py`` the typed tiling
with its per-chip default and tuning space. The epilogue is a parameter
(``epilogue(acc, *param_blocks) -> out_block``), each parameter with its
tiling kind: ``tile``, ``row``, ``col`` or ``scalar``.
"""

from __future__ import annotations

from typing import Any

import jax.numpy as jnp

from mk.kernels.matmul.config import Config, Shapes, default, space
from mk.kernels.matmul.gpu import matmul_gpu
from mk.kernels.matmul.reference import matmul as reference
from mk.kernels.matmul.splitk_gpu import matmul_splitk_gpu
from mk.kernels.matmul.splitk_tpu import matmul_splitk_tpu
from mk.kernels.matmul.tpu import matmul_tpu
from mk.targets import kernel_language, kernel_spec

KINDS = ("tile", "row", "col", "scalar")


def matmul(x: Any, w: Any, *params: Any, target: str, kinds: tuple[str, ...] = (), epilogue: Any = None,
           transpose_w: bool = False, splitk: bool = False, config: Config | None = None, chip: str | None = None,
           **kernel_kwargs: Any) -> Any:
    """The ``target`` kernel (``tpu`` or ``gpu``; ``splitk``: the split-K one) with ``config`` or the chip's
    default tiling."""
    spec = kernel_spec(target)  # the target's hardware spec; a TargetError for a target with no kernels
    if any(k not in KINDS for k in kinds):
        raise ValueError(f"parameter kinds are {KINDS}, got {kinds!r}")
    n = w.shape[0 if transpose_w else 1]
    shapes = Shapes(x.shape[0], n, x.shape[1], jnp.dtype(x.dtype).itemsize, kernel_kwargs.get("full_n", False))
    config = config or default(chip or spec, shapes, splitk)
    config.check(target)
    if splitk:
        fn = matmul_splitk_tpu if kernel_language(target) == "mosaic" else matmul_splitk_gpu
        return fn(x, w, *params, epilogue=epilogue, transpose_w=transpose_w, **config.kwargs(target, True),
                  **kernel_kwargs)
    fn = matmul_tpu if kernel_language(target) == "mosaic" else matmul_gpu
    return fn(x, w, *params, kinds=kinds, epilogue=epilogue, transpose_w=transpose_w, **config.kwargs(target),
              **kernel_kwargs)


__all__ = ["Config", "KINDS", "Shapes", "default", "matmul", "matmul_gpu", "matmul_splitk_gpu",
           "matmul_splitk_tpu", "matmul_tpu", "reference", "space"]
