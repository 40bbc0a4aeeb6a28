"""42k_Gemm_Max_Subtract_GELU.

tanh-GELU of (h - rowmax(h)) for h = x @ W + b.
Source: KernelBench Level-2 #80 Gemm_Max_Subtract_GELU (JaxBench).
mk's own implementation, written from the published task facts; the full
semantics are in ``DESCRIPTION``.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp

from mk.task import ArgSpec, Init, Scale, Task, Tolerance

DESCRIPTION = (
    "h = x @ W + b, with W stored (in,out) = (8192,8192) and default matmul precision, f32 in/out. h = h "
    "- max_j h[b,j] (row max with keepdims), so h <= 0. out = GELU via the jax.nn.gelu default "
    "(approximate=True): 0.5*h*(1+tanh(sqrt(2/pi)*(h+0.044715*h^3))). Output (4096,8192) f32, full width:"
    " the max is subtracted, not reduced to a single column."
)

#: Published cost facts at the full scale: GFLOP of the reference as written, minimum bytes moved.
GFLOP = 550.1
MIN_BYTES = 536903680


def gemm_max_subtract_gelu(x, weight, bias):
    h = jnp.dot(x, weight) + bias
    h = h - jnp.max(h, axis=1, keepdims=True)
    return jax.nn.gelu(h)


TASK = Task(
    name="42k_Gemm_Max_Subtract_GELU",
    reference=gemm_max_subtract_gelu,
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
