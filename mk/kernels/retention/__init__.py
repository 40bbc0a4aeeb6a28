"""Causal decayed retention: ``out_i = sum_{j<=i} cast(s_ij / post(sum_j pre(s_ij))) v_j``, ``s_ij = (q_i . k_j)
exp(c_i - c_j)``.

RetNet's parallel retention (``c = i * log(gamma_h)``, ``pre = abs``) and
Mamba-2's SSD in its quadratic form (``c = cumsum(log a)``, a signed row sum)
are both this computation. ``reference.py`` is the plain-JAX form, ``tpu.py``
the Mosaic kernel (two passes over key blocks per query block: streamed along
an "arbitrary" grid axis, or resident in VMEM), ``gpu.py`` the Triton kernel
(two loops over the keys in one program, or one loop dividing at the end),
``config.py`` the typed tiling.
"""

from __future__ import annotations

from typing import Any

import jax.numpy as jnp

from mk.kernels.retention.config import Config, Shapes, default, space
from mk.kernels.retention.gpu import retention_gpu
from mk.kernels.retention.reference import abs_norm, clamp_one, retention as reference
from mk.kernels.retention.tpu import retention_tpu
from mk.targets import kernel_language, kernel_spec


def retention(q: Any, k: Any, v: Any, c: Any, *, target: str, config: Config | None = None, chip: str | None = None,
              **kernel_kwargs: Any) -> Any:
    """The ``target`` kernel (``tpu`` or ``gpu``) with ``config`` or the chip's default tiling."""
    spec = kernel_spec(target)  # the target's hardware spec; a TargetError for a target with no kernels
    b, h, s, d = q.shape
    shapes = Shapes(b, h, s, d, v.shape[3], jnp.dtype(q.dtype).itemsize)
    config = config or default(chip or spec, shapes)
    config.check(target)
    fn = retention_tpu if kernel_language(target) == "mosaic" else retention_gpu
    return fn(q, k, v, c, **config.kwargs(target), **kernel_kwargs)


__all__ = ["Config", "Shapes", "abs_norm", "clamp_one", "default", "reference", "retention", "retention_gpu",
           "retention_tpu", "space"]
