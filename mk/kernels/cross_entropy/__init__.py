"""LM-head cross-entropy. Forward: logits tiles in on-chip memory, an online log-sum-exp over vocabulary blocks,
per-token losses out (the logits never reach HBM). Backward: ``lse`` recomputed (online over vocabulary blocks), ``dlogits = c * (softmax -
onehot)`` per tile in a kernel, then ``dx = dlogits @ W^T`` and ``dW = x^T @ dlogits``.

``reference.py`` is the per-token loss and its VJP, ``tpu.py`` the Mosaic kernels, ``gpu.py`` the Triton kernels,
``config.py`` the typed tiling. The forward saves nothing: the backward recomputes the log-sum-exp.
"""

from __future__ import annotations

from typing import Any

import jax.numpy as jnp

from mk.kernels.cross_entropy.config import Config, FwdConfig, Shapes, default, fwd_default, fwd_space, space
from mk.kernels.cross_entropy.gpu import ce_bwd_gpu, ce_fwd_gpu
from mk.kernels.cross_entropy.reference import ce_bwd, per_token_loss
from mk.kernels.cross_entropy.tpu import ce_bwd_tpu, ce_fwd_tpu
from mk.targets import kernel_language, kernel_spec


def cross_entropy_bwd(x: Any, w: Any, labels: Any, c: Any, *, target: str, config: Config | None = None,
                      chip: str | None = None, **kernel_kwargs: Any) -> tuple[Any, Any]:
    """(dx, dw) on ``target`` (tpu or gpu) for per-token cotangents ``c``."""
    spec = kernel_spec(target)  # the target's hardware spec; a TargetError for a target with no kernels
    config = config or default(chip or spec, Shapes(x.shape[0], x.shape[1], w.shape[1], jnp.dtype(x.dtype).itemsize))
    config.check(target)
    fn = ce_bwd_tpu if kernel_language(target) == "mosaic" else ce_bwd_gpu
    return fn(x, w, labels, c, **config.kwargs(target), **kernel_kwargs)


def cross_entropy_fwd(x: Any, w: Any, labels: Any, *, target: str, w_vocab_first: bool = False,
                      x_tokens_first: bool = True, config: FwdConfig | None = None, chip: str | None = None,
                      **kernel_kwargs: Any) -> Any:
    """Per-token losses ``lse(x @ W) - (x @ W)[label]`` (f32, (T,)) on ``target`` (tpu or gpu); W (H, V), or (V, H)
    when ``w_vocab_first``; x (T, H), or (H, T) when not ``x_tokens_first``."""
    spec = kernel_spec(target)  # the target's hardware spec; a TargetError for a target with no kernels
    t, h = x.shape if x_tokens_first else x.shape[::-1]
    v = w.shape[0] if w_vocab_first else w.shape[1]
    config = config or fwd_default(chip or spec, Shapes(t, h, v, jnp.dtype(x.dtype).itemsize))
    config.check(target)
    fn = ce_fwd_tpu if kernel_language(target) == "mosaic" else ce_fwd_gpu
    return fn(x, w, labels, w_vocab_first=w_vocab_first, x_tokens_first=x_tokens_first, **config.kwargs(target),
              **kernel_kwargs)


__all__ = ["Config", "FwdConfig", "Shapes", "ce_bwd", "ce_bwd_gpu", "ce_bwd_tpu", "ce_fwd_gpu", "ce_fwd_tpu",
           "cross_entropy_bwd", "cross_entropy_fwd", "default", "fwd_default", "fwd_space", "per_token_loss", "space"]
