"""Flash attention: ``softmax(q k^T * scale + bias [causal]) v`` with an online softmax, MHA and GQA.

``reference.py`` is the plain-JAX computation, ``tpu.py`` the Mosaic kernels
(key blocks as a grid axis with scratch accumulators, or walked in the kernel
with the whole key sequence in VMEM), ``gpu.py`` the Triton kernels (one pass
with an online softmax, or two passes), ``config.py`` the typed tiling with its
per-chip default and tuning space. The additive score bias (a FlexAttention
score_mod, an ALiBi or relative-position table) is optional and streamed block
by block; so are the inputs of a general score modification ``mod(s, *tiles)``
(masks, soft caps, sliding windows), which then replaces the scale and the bias.
"""

from __future__ import annotations

from typing import Any

import jax.numpy as jnp

from mk.kernels.flash_attention.config import Config, Shapes, default, space
from mk.kernels.flash_attention.gpu import flash_attention_gpu, flash_attention_gpu_two_pass
from mk.kernels.flash_attention.reference import attention as reference
from mk.kernels.flash_attention.tpu import flash_attention_tpu, flash_attention_tpu_loop
from mk.targets import kernel_language, kernel_spec

#: schedule name -> (TPU kernel, GPU kernel)
SCHEDULES = {"online": (flash_attention_tpu, flash_attention_gpu),
             "resident": (flash_attention_tpu_loop, flash_attention_gpu_two_pass)}


def flash_attention(q: Any, k: Any, v: Any, bias: Any = None, *, target: str, scale: float, causal: bool = False,
                    schedule: str = "online", config: Config | None = None, chip: str | None = None,
                    **kernel_kwargs: Any) -> Any:
    """The ``target`` kernel (``tpu`` or ``gpu``) of ``schedule`` with ``config`` or the chip's default."""
    spec = kernel_spec(target)  # the target's hardware spec; a TargetError for a target with no kernels
    if schedule not in SCHEDULES:
        raise ValueError(f"schedule must be one of {sorted(SCHEDULES)}, got {schedule!r}")
    shapes = Shapes(q.shape[0], q.shape[1], q.shape[2], k.shape[2], q.shape[3], jnp.dtype(q.dtype).itemsize)
    config = config or default(chip or spec, shapes)
    config.check(target)
    tpu_fn, gpu_fn = SCHEDULES[schedule]
    fn = tpu_fn if kernel_language(target) == "mosaic" else gpu_fn
    return fn(q, k, v, bias, scale=scale, causal=causal, **config.kwargs(target), **kernel_kwargs)


__all__ = ["Config", "SCHEDULES", "Shapes", "default", "flash_attention", "flash_attention_gpu",
           "flash_attention_gpu_two_pass", "flash_attention_tpu", "flash_attention_tpu_loop", "reference", "space"]
