"""Gated MLP (SwiGLU): ``act(x @ wg, x @ wu) @ wd`` with both up-projections and the down-projection fused.

``reference.py`` is the plain-JAX computation, ``tpu.py`` the Mosaic kernel
(hidden blocks as the reduction axis of the grid), ``gpu.py`` the Triton kernel
(a loop over hidden blocks per output tile), ``config.py`` the typed tiling
with its per-chip default and tuning space. The activation (``silu(g) * u`` by
default) is a parameter, so other gated units (GeGLU, ReGLU) use the same kernels;
so do the other MLPs models write: ungated (``wu=None``: ReLU², GELU), a fused
gate-up weight (``halves``) and weights kept as (out, in) (``up_t``, ``down_t``).
"""

from __future__ import annotations

from typing import Any

import jax.numpy as jnp

from mk.kernels.swiglu.config import Config, Shapes, default, space
from mk.kernels.swiglu.gpu import swiglu_gpu
from mk.kernels.swiglu.reference import silu_gate, swiglu as reference
from mk.kernels.swiglu.tpu import swiglu_tpu
from mk.targets import kernel_language, kernel_spec


def swiglu(x: Any, wg: Any, wu: Any, wd: Any, *, target: str, config: Config | None = None, chip: str | None = None,
           **kernel_kwargs: Any) -> Any:
    """The ``target`` kernel (``tpu`` or ``gpu``) over x's last axis, with ``config`` or the chip's default."""
    spec = kernel_spec(target)  # the target's hardware spec; a TargetError for a target with no kernels
    lead, e = x.shape[:-1], x.shape[-1]
    x2 = x.reshape(-1, e)
    f = (wg.shape[0] if kernel_kwargs.get("up_t") else wg.shape[1]) // (2 if kernel_kwargs.get("halves") else 1)
    d = wd.shape[0] if kernel_kwargs.get("down_t") else wd.shape[1]
    shapes = Shapes(x2.shape[0], e, f, d, jnp.dtype(x.dtype).itemsize)
    config = config or default(chip or spec, shapes)
    config.check(target)
    fn = swiglu_tpu if kernel_language(target) == "mosaic" else swiglu_gpu
    return fn(x2, wg, wu, wd, **config.kwargs(target), **kernel_kwargs).reshape(*lead, d)


__all__ = ["Config", "Shapes", "default", "reference", "silu_gate", "space", "swiglu", "swiglu_gpu", "swiglu_tpu"]
