"""35k_Gemm_Scaling_Hardtanh_GELU.

scaled GEMM, hardtanh(-2, 2), explicit tanh-GELU.
Source: KernelBench Level-2 #53 Gemm_Scaling_Hardtanh_GELU (JaxBench).
mk's own implementation, written from the published task facts; the full
semantics are in ``DESCRIPTION``.
"""

from __future__ import annotations

import jax.numpy as jnp

from mk.task import ArgSpec, Init, Scale, StaticArg, Task, Tolerance

DESCRIPTION = (
    "h = (x @ W + b) * 0.5, with W stored (in,out) = (8192,8192) and default matmul precision, f32 "
    "in/out. h = clip(h, -2, 2), where the static bounds are Python ints. out = h*0.5*(1 + "
    "tanh(sqrt(2/pi)*(h + 0.044715*h^3))), an explicitly written tanh-GELU. Output (4096,8192) f32."
)

#: Published cost facts at the full scale: GFLOP of the reference as written, minimum bytes moved.
GFLOP = 550.2
MIN_BYTES = 536903680


def gemm_scaling_hardtanh_gelu(x, weight, bias, scaling_factor, hardtanh_min, hardtanh_max):
    h = (jnp.dot(x, weight) + bias) * scaling_factor
    h = jnp.clip(h, hardtanh_min, hardtanh_max)
    return h * 0.5 * (1.0 + jnp.tanh(jnp.sqrt(2.0 / jnp.pi) * (h + 0.044715 * h**3)))


TASK = Task(
    name="35k_Gemm_Scaling_Hardtanh_GELU",
    reference=gemm_scaling_hardtanh_gelu,
    args=(
        ArgSpec("x", ("B", "K"), "float32", Init("uniform", low=0.0, high=1.0)),
        ArgSpec("weight", ("K", "N"), "float32", Init("normal", std=0.02)),
        ArgSpec("bias", ("N",), "float32", Init("normal", std=0.02)),
    ),
    static=(
        StaticArg("scaling_factor", 0.5),
        StaticArg("hardtanh_min", -2),
        StaticArg("hardtanh_max", 2),
    ),
    tolerance=Tolerance(atol=0.01, rtol=0.01),
    scales={
        "full": Scale("full", dims={"B": 4096, "K": 8192, "N": 8192}),
        "ci": Scale("ci", dims={"B": 16, "K": 8192, "N": 128}),
    },
    description=DESCRIPTION,
    kind="builtin",
    default_scale="full",
)
