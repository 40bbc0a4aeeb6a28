"""Paged decode attention: one query token per sequence over a paged KV cache (vLLM/JetStream layout).

``reference.py`` is the plain-JAX computation, ``tpu.py`` the Mosaic kernel
(page table and lengths in scalar prefetch; the index maps DMA each page
straight from the cache), ``gpu.py`` the Triton kernel (one program per
sequence and kv head looping over its pages), ``config.py`` the typed tiling
with its per-chip default and tuning space. A sequence of length 0 attends to nothing: both kernels give it zeros
(the reference's masked softmax gives the mean of all its slots' values instead).
"""

from __future__ import annotations

from typing import Any

import jax.numpy as jnp

from mk.kernels.paged_attention.config import Config, Shapes, default, space
from mk.kernels.paged_attention.gpu import paged_attention_gpu
from mk.kernels.paged_attention.reference import paged_attention as reference
from mk.kernels.paged_attention.tpu import paged_attention_tpu
from mk.targets import kernel_language, kernel_spec


def paged_attention(q: Any, k_pages: Any, v_pages: Any, lengths: Any, page_indices: Any, *, target: str, scale: float,
                    config: Config | None = None, chip: str | None = None, **kernel_kwargs: Any) -> Any:
    """The ``target`` kernel (``tpu`` or ``gpu``) with ``config`` or the chip's default."""
    spec = kernel_spec(target)  # the target's hardware spec; a TargetError for a target with no kernels
    shapes = Shapes(q.shape[0], q.shape[1], k_pages.shape[2], q.shape[2], k_pages.shape[1], page_indices.shape[1],
                    jnp.dtype(k_pages.dtype).itemsize)
    config = config or default(chip or spec, shapes)
    config.check(target)
    fn = paged_attention_tpu if kernel_language(target) == "mosaic" else paged_attention_gpu
    return fn(q, k_pages, v_pages, lengths, page_indices, scale=scale, **config.kwargs(target), **kernel_kwargs)


__all__ = ["Config", "Shapes", "default", "paged_attention", "paged_attention_gpu", "paged_attention_tpu", "reference",
           "space"]
