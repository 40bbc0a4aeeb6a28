"""8p_GEMM.

Dense bf16 matmul with a bf16 result.
Source: Llama-3.1-70B dense matmul (JaxBench production task). mk's own implementation, written from
the published task facts; the full semantics are in ``DESCRIPTION``.
"""

from __future__ import annotations

import jax.numpy as jnp

from mk.task import ArgSpec, Init, Scale, Task, Tolerance

DESCRIPTION = (
    "C = A @ B via jnp.dot on bf16 operands, default precision, bf16 result (the backend accumulates at "
    "higher precision). M=8192, K=8192, N=28672. Output (8192,28672) bf16."
)

GFLOP = 3848.3
MIN_BYTES = 1073741824


def gemm(A, B):
    """A (M,K) @ B (K,N), bf16 in and out, default precision."""
    return jnp.dot(A, B)


TASK = Task(
    name="8p_GEMM",
    reference=gemm,
    args=(
        ArgSpec("A", ("M", "K"), "bfloat16", Init("normal")),
        ArgSpec("B", ("K", "N"), "bfloat16", Init("normal", std=0.02)),
    ),
    static=(),
    tolerance=Tolerance(atol=0.01, rtol=0.01),
    scales={
        "full": Scale("full", dims={"M": 8192, "K": 8192, "N": 28672}),
        "ci": Scale("ci", dims={"M": 128, "K": 256, "N": 384}),
    },
    description=DESCRIPTION,
    kind="builtin",
    default_scale="full",
)
