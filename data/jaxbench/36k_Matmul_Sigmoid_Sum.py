"""36k_Matmul_Sigmoid_Sum.

row sum of sigmoid(x @ W + b).
Source: KernelBench Level-2 #56 Matmul_Sigmoid_Sum (JaxBench).
mk's own implementation, written from the published task facts; the full
semantics are in ``DESCRIPTION``.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp

from mk.task import ArgSpec, Init, Scale, Task, Tolerance

DESCRIPTION = (
    "h = sigmoid(x @ W + b), with W stored (in,out) = (8192,8192) and default matmul precision, f32 "
    "in/out. out = sum_j h[b,j] with keepdims. Output (4096,1) f32."
)

#: Published cost facts at the full scale: GFLOP of the reference as written, minimum bytes moved.
GFLOP = 549.9
MIN_BYTES = 402702336


def matmul_sigmoid_sum(x, weight, bias):
    h = jax.nn.sigmoid(jnp.dot(x, weight) + bias)
    return jnp.sum(h, axis=1, keepdims=True)


TASK = Task(
    name="36k_Matmul_Sigmoid_Sum",
    reference=matmul_sigmoid_sum,
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
