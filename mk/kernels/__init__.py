"""mk's kernel library: one package per op family, in the shape of ``jax.experimental.pallas.ops`` and tokamax.

Each family has ``reference.py`` (plain JAX), ``tpu.py`` (Mosaic), ``gpu.py``
(Triton) and ``config.py`` (a frozen, self-validating ``Config``, a per-chip
``default`` read from data/hardware.json and the tuning ``space`` derived from
the same fields). The kernel files import only jax, so the offline author
(mk/author) copies them verbatim into the standalone kernels it writes and
generates only the task's epilogue.

Families: :mod:`mk.kernels.conv` (convolution as implicit GEMM with a fused epilogue), :mod:`mk.kernels.gmm`
(grouped matmul over contiguous row groups, megablox-style), :mod:`mk.kernels.matmul` (tiled matmul with a
fused epilogue, and split-K), :mod:`mk.kernels.swiglu` (gated MLP with both
up-projections and the down-projection fused).
"""

from __future__ import annotations

FAMILIES = ("conv", "gmm", "matmul", "swiglu")

__all__ = ["FAMILIES"]
