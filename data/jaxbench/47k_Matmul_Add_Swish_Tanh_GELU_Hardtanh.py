"""47k_Matmul_Add_Swish_Tanh_GELU_Hardtanh.

GEMM + add_value, swish, tanh, tanh-GELU, clip to [-1, 1].
Source: KernelBench Level-2 #95 Matmul_Add_Swish_Tanh_GELU_Hardtanh (JaxBench).
mk's own implementation, written from the published task facts; the full
semantics are in ``DESCRIPTION``.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp

from mk.task import ArgSpec, Init, Scale, Task, Tolerance

DESCRIPTION = (
    "h = x @ W + b + add_value, with W stored (in,out) = (8192,8192) and default matmul precision, f32 "
    "in/out. h = h*sigmoid(h) (swish); h = tanh(h); h = GELU via the jax.nn.gelu default "
    "(approximate=True): 0.5*h*(1+tanh(sqrt(2/pi)*(h+0.044715*h^3))); out = clip(h, -1, 1). Output "
    "(4096,8192) f32."
)

#: Published cost facts at the full scale: GFLOP of the reference as written, minimum bytes moved.
GFLOP = 550.3
MIN_BYTES = 536936448


def matmul_add_swish_tanh_gelu_hardtanh(x, weight, bias, add_value):
    h = jnp.dot(x, weight) + bias + add_value
    h = h * jax.nn.sigmoid(h)
    h = jnp.tanh(h)
    h = jax.nn.gelu(h)
    return jnp.clip(h, -1.0, 1.0)


TASK = Task(
    name="47k_Matmul_Add_Swish_Tanh_GELU_Hardtanh",
    reference=matmul_add_swish_tanh_gelu_hardtanh,
    args=(
        ArgSpec("x", ("B", "K"), "float32", Init("uniform", low=0.0, high=1.0)),
        ArgSpec("weight", ("K", "N"), "float32", Init("normal", std=0.02)),
        ArgSpec("bias", ("N",), "float32", Init("normal", std=0.02)),
        ArgSpec("add_value", ("N",), "float32", Init("normal", std=0.02)),
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
