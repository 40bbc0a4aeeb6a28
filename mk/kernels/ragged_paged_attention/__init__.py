"""Ragged paged attention: a batch mixing decode tokens and prefill chunks (cu_q_lens) over a paged KV cache with
combined K/V heads (K of kv head g at combined head 2g, V at 2g + 1), causal with each sequence's queries last.

``reference.py`` is the plain-JAX computation, ``tpu.py`` the Mosaic kernel
(one program per token block and kv head; the sequences overlapping the block,
cu_q_lens, kv_lens and the page table in scalar prefetch; pages copied by
manual double-buffered DMAs, only up to each sequence's length and causal
limit), ``gpu.py`` the Triton kernel (the same schedule, pages loaded by
dynamic index), ``config.py`` the typed tiling with its per-chip default and
tuning space.
"""

from __future__ import annotations

from typing import Any

import jax.numpy as jnp

from mk.kernels.ragged_paged_attention.config import Config, Shapes, default, space
from mk.kernels.ragged_paged_attention.gpu import ragged_paged_attention_gpu
from mk.kernels.ragged_paged_attention.reference import ragged_paged_attention as reference
from mk.kernels.ragged_paged_attention.tpu import ragged_paged_attention_tpu
from mk.targets import kernel_language, kernel_spec


def shapes_of(queries: Any, kv_pages: Any, page_indices: Any) -> Shapes:
    """The :class:`Shapes` of a call's arrays."""
    return Shapes(queries.shape[0], queries.shape[1], kv_pages.shape[2] // 2, queries.shape[2], kv_pages.shape[1],
                  page_indices.shape[1], jnp.dtype(kv_pages.dtype).itemsize)


def ragged_paged_attention(queries: Any, kv_pages: Any, kv_lens: Any, page_indices: Any, cu_q_lens: Any,
                           num_seqs: Any, *, target: str, scale: float, config: Config | None = None,
                           chip: str | None = None, **kernel_kwargs: Any) -> Any:
    """The ``target`` kernel (``tpu`` or ``gpu``) with ``config`` or the chip's default."""
    spec = kernel_spec(target)  # the target's hardware spec; a TargetError for a target with no kernels
    config = config or default(chip or spec, shapes_of(queries, kv_pages, page_indices))
    config.check(target)
    fn = ragged_paged_attention_tpu if kernel_language(target) == "mosaic" else ragged_paged_attention_gpu
    return fn(queries, kv_pages, kv_lens, page_indices, cu_q_lens, num_seqs, scale=scale, **config.kwargs(target),
              **kernel_kwargs)


__all__ = ["Config", "Shapes", "default", "ragged_paged_attention", "ragged_paged_attention_gpu",
           "ragged_paged_attention_tpu", "reference", "shapes_of", "space"]
