"""Grouped matmul (megablox-style): contiguous row groups of ``lhs`` times one weight matrix each.

``reference.py`` is the plain-JAX computation, ``tpu.py`` the Mosaic kernel
(group offsets and the visit table in scalar prefetch), ``gpu.py`` the Triton
kernel (one program per tile, looping over its groups), ``config.py`` the
typed tiling with its per-chip default and tuning space. A batched matmul
(G, Mg, K) x (G, K, N) is the special case of G equal groups of Mg rows.
"""

from __future__ import annotations

from typing import Any

import jax.numpy as jnp

from mk.kernels.gmm.config import Config, Shapes, default, space
from mk.kernels.gmm.gpu import gmm_gpu
from mk.kernels.gmm.reference import gmm as reference
from mk.kernels.gmm.tpu import gmm_tpu
from mk.targets import kernel_language, kernel_spec


def gmm(lhs: Any, rhs: Any, group_sizes: Any, *, target: str, config: Config | None = None, chip: str | None = None,
        **kernel_kwargs: Any) -> Any:
    """The ``target`` kernel (``tpu`` or ``gpu``) with ``config`` or the chip's default tiling."""
    spec = kernel_spec(target)  # the target's hardware spec; a TargetError for a target with no kernels
    shapes = Shapes(lhs.shape[0], lhs.shape[1], rhs.shape[2], rhs.shape[0], jnp.dtype(lhs.dtype).itemsize)
    config = config or default(chip or spec, shapes)
    config.check(target)
    fn = gmm_tpu if kernel_language(target) == "mosaic" else gmm_gpu
    return fn(lhs, rhs, group_sizes, **config.kwargs(target), **kernel_kwargs)


__all__ = ["Config", "Shapes", "default", "gmm", "gmm_gpu", "gmm_tpu", "reference", "space"]
