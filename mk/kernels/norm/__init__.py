"""RMSNorm and LayerNorm backward: dx row-wise, the weight (and bias) gradients reduced over rows; and the two-pass
forward (softmax, RMSNorm, LayerNorm) for rows too long to hold on chip (``tpu_two_pass.py``, ``gpu_two_pass.py``).

``reference.py`` is the plain-JAX forward and its VJP, ``tpu.py`` the Mosaic
kernel (rows as an "arbitrary" grid axis, the weight gradient accumulated in
VMEM), ``gpu.py`` the Triton kernel (per-block partials summed after),
``config.py`` the typed tiling with its per-chip default and tuning space. The
forward saves nothing: the backward recomputes the row statistics from x.
"""

from __future__ import annotations

from typing import Any

import jax.numpy as jnp

from mk.kernels.norm.config import Config, Shapes, TwoPassConfig, default, space, two_pass_default, two_pass_space
from mk.kernels.norm.gpu import norm_bwd_gpu
from mk.kernels.norm.reference import layernorm, layernorm_bwd, rmsnorm, rmsnorm_bwd, softmax
from mk.kernels.norm.tpu import norm_bwd_tpu
from mk.kernels.norm.gpu_two_pass import two_pass_gpu
from mk.kernels.norm.tpu_two_pass import two_pass_tpu
from mk.targets import kernel_language, kernel_spec


def norm_bwd(x: Any, w: Any | None, b: Any | None, g: Any, *, kind: str, eps: float, target: str,
             config: Config | None = None, chip: str | None = None) -> tuple[Any, Any, Any]:
    """(dx, dw, db) of RMSNorm (``kind="rms"``) or LayerNorm (``kind="layer"``) on ``target`` (tpu or gpu)."""
    spec = kernel_spec(target)  # the target's hardware spec; a TargetError for a target with no kernels
    n = 1
    for s in x.shape[:-1]:
        n *= s
    config = config or default(chip or spec, Shapes(n, x.shape[-1], jnp.dtype(x.dtype).itemsize))
    config.check(target)
    fn = norm_bwd_tpu if kernel_language(target) == "mosaic" else norm_bwd_gpu
    return fn(x, w, b, g, kind=kind, eps=eps, **config.kwargs(target))


def two_pass(x: Any, w: Any | None, b: Any | None, *, kind: str, eps: float = 0.0, target: str,
             config: TwoPassConfig | None = None, chip: str | None = None, out_dtype: Any = None) -> Any:
    """Softmax (``kind="softmax"``), RMSNorm or LayerNorm over x's last axis in two passes on ``target``."""
    spec = kernel_spec(target)  # the target's hardware spec; a TargetError for a target with no kernels
    n = 1
    for s in x.shape[:-1]:
        n *= s
    config = config or two_pass_default(chip or spec, Shapes(n, x.shape[-1], jnp.dtype(x.dtype).itemsize))
    config.check(target)
    fn = two_pass_tpu if kernel_language(target) == "mosaic" else two_pass_gpu
    return fn(x, w, b, kind=kind, eps=eps, out_dtype=out_dtype, **config.kwargs(target))


__all__ = ["Config", "Shapes", "TwoPassConfig", "default", "layernorm", "layernorm_bwd", "norm_bwd", "norm_bwd_gpu",
           "norm_bwd_tpu", "rmsnorm", "rmsnorm_bwd", "softmax", "space", "two_pass", "two_pass_default",
           "two_pass_gpu", "two_pass_space", "two_pass_tpu"]
