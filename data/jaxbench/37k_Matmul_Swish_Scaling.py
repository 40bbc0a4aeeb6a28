"""37k_Matmul_Swish_Scaling.

2 * swish(x @ W + b).
Source: KernelBench Level-2 #59 Matmul_Swish_Scaling (JaxBench).
mk's own implementation, written from the published task facts; the full
semantics are in ``DESCRIPTION``.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp

from mk.task import ArgSpec, Init, Scale, Task, Tolerance

DESCRIPTION = (
    "h = x @ W + b, with W stored (in,out) = (8192,8192) and default matmul precision, f32 in/out. out = "
    "2.0 * h*sigmoid(h). Output (4096,8192) f32."
)

#: Published cost facts at the full scale: GFLOP of the reference as written, minimum bytes moved.
GFLOP = 550.0
MIN_BYTES = 536903680


def matmul_swish_scaling(x, weight, bias):
    h = jnp.dot(x, weight) + bias
    return 2.0 * (h * jax.nn.sigmoid(h))


TASK = Task(
    name="37k_Matmul_Swish_Scaling",
    reference=matmul_swish_scaling,
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
