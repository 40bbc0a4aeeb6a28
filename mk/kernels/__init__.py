"""mk's kernel library: one package per op family, in the shape of ``jax.experimental.pallas.ops`` and tokamax.

Each family has ``reference.py`` (plain JAX), ``tpu.py`` (Mosaic), ``gpu.py``
(Triton) and ``config.py`` (a frozen, self-validating ``Config``, a per-chip
``default`` read from data/hardware.json and the tuning ``space`` derived from
the same fields); some have more kernels beside them (split-K, two-pass,
backward). The kernel files import only jax, so the offline author
(mk/author) copies them verbatim into the standalone kernels it writes and
generates only the task's epilogue.

Families (``FAMILIES``; a test keeps it equal to the packages here):

- :mod:`mk.kernels.conv`: convolution as implicit GEMM with a fused per-sample epilogue.
- :mod:`mk.kernels.cross_entropy`: the fused LM-head cross-entropy (online log-sum-exp over vocabulary blocks), forward
  and backward.
- :mod:`mk.kernels.flash_attention`: online-softmax attention (causal or not, MHA/GQA, an optional score bias), forward
  (two schedules) and backward (``bwd_tpu``, ``bwd_gpu``).
- :mod:`mk.kernels.gmm`: grouped matmul over contiguous row groups (megablox-style), the fused grouped gated MLP
  (``mlp_*``) and the unsorted masked MoE (``masked_*``).
- :mod:`mk.kernels.matmul`: tiled matmul with a fused epilogue, and split-K (``splitk_*``).
- :mod:`mk.kernels.norm`: RMSNorm/LayerNorm backward, and the two-pass forward for long rows (``*_two_pass``).
- :mod:`mk.kernels.paged_attention`: decode attention over a page table.
- :mod:`mk.kernels.ragged_paged_attention`: a batch mixing decode tokens and prefill chunks over combined K/V pages.
- :mod:`mk.kernels.retention`: causal decayed retention with a row normaliser (RetNet, Mamba-2 SSD).
- :mod:`mk.kernels.rowwise`: the whole-rows ``pallas_call`` skeleton, taking a block-local body.
- :mod:`mk.kernels.swiglu`: the MLP (gated or not, a fused gate-up weight, (out, in) weights) with its
  up-projection(s) and down-projection fused.
"""

from __future__ import annotations

FAMILIES = ("conv", "cross_entropy", "flash_attention", "gmm", "matmul", "norm", "paged_attention",
            "ragged_paged_attention", "retention", "rowwise", "swiglu")

__all__ = ["FAMILIES"]
