"""LM-head cross-entropy backward: ``lse`` recomputed (online over vocabulary blocks), ``dlogits = c * (softmax -
onehot)`` per tile in a kernel, then ``dx = dlogits @ W^T`` and ``dW = x^T @ dlogits``.

``reference.py`` is the per-token loss and its VJP, ``tpu.py`` the Mosaic kernels, ``gpu.py`` the Triton kernels,
``config.py`` the typed tiling. The forward saves nothing: the backward recomputes the log-sum-exp.
"""

from __future__ import annotations

from typing import Any

import jax.numpy as jnp

from mk.kernels.cross_entropy.config import Config, Shapes, default, space
from mk.kernels.cross_entropy.gpu import ce_bwd_gpu
from mk.kernels.cross_entropy.reference import ce_bwd, per_token_loss
from mk.kernels.cross_entropy.tpu import ce_bwd_tpu
from mk.targets import kernel_language

_CHIPS = {"tpu": "v6e", "gpu": "h200"}


def cross_entropy_bwd(x: Any, w: Any, labels: Any, c: Any, *, target: str, config: Config | None = None,
                      chip: str | None = None, **kernel_kwargs: Any) -> tuple[Any, Any]:
    """(dx, dw) on ``target`` (tpu or gpu) for per-token cotangents ``c``."""
    if target not in _CHIPS:
        raise ValueError(f"target must be one of {sorted(_CHIPS)}, got {target!r}")
    config = config or default(chip or _CHIPS[target], Shapes(x.shape[0], x.shape[1], w.shape[1], jnp.dtype(x.dtype).itemsize))
    config.check(target)
    fn = ce_bwd_tpu if kernel_language(target) == "mosaic" else ce_bwd_gpu
    return fn(x, w, labels, c, **config.kwargs(target), **kernel_kwargs)


__all__ = ["Config", "Shapes", "ce_bwd", "ce_bwd_gpu", "ce_bwd_tpu", "cross_entropy_bwd", "default", "per_token_loss",
           "space"]
