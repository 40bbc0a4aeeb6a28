"""20k_Gemm_Multiply_LeakyReLU.

LeakyReLU(0.1) of (x @ W + b) * 2.
Source: KernelBench Level-2 #12 Gemm_Multiply_LeakyReLU (JaxBench).
mk's own implementation, written from the published task facts; the full
semantics are in ``DESCRIPTION``.
"""

from __future__ import annotations

import jax.numpy as jnp

from mk.task import ArgSpec, Init, Scale, Task, Tolerance

DESCRIPTION = (
    "z = (x @ W + b) * 2.0, with W stored (in,out) = (8192,8192) and default matmul precision, f32 "
    "in/out. y = where(z >= 0, z, 0.1*z), a LeakyReLU with slope 0.1. The constants are hard-coded. "
    "Output (4096,8192) f32."
)

#: Published cost facts at the full scale: GFLOP of the reference as written, minimum bytes moved.
GFLOP = 549.9
MIN_BYTES = 536903680


def gemm_multiply_leaky_relu(x, weight, bias):
    z = (jnp.dot(x, weight) + bias) * 2.0
    return jnp.where(z >= 0, z, 0.1 * z)


TASK = Task(
    name="20k_Gemm_Multiply_LeakyReLU",
    reference=gemm_multiply_leaky_relu,
    args=(
        ArgSpec("x", ("B", "K"), "float32", Init("uniform", low=0.0, high=1.0)),
        ArgSpec("weight", ("K", "N"), "float32", Init("normal", std=0.02)),
        ArgSpec("bias", ("N",), "float32", Init("normal", std=0.02)),
    ),
    static=(),
    tolerance=Tolerance(atol=0.01, rtol=0.01),
    scales={
        "full": Scale("full", dims={"B": 4096, "K": 8192, "N": 8192}),
        "ci": Scale("ci", dims={"B": 16, "K": 8192, "N": 128}),
    },
    description=DESCRIPTION,
    kind="builtin",
    default_scale="full",
)
