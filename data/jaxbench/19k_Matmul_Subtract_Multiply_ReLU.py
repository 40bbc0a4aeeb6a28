"""19k_Matmul_Subtract_Multiply_ReLU.

relu(((x @ W + b) - subtract_value) * multiply_value).
Source: KernelBench Level-2 #9 Matmul_Subtract_Multiply_ReLU (JaxBench).
mk's own implementation, written from the published task facts; the full
semantics are in ``DESCRIPTION``.
"""

from __future__ import annotations

import jax.numpy as jnp

from mk.task import ArgSpec, Init, Scale, StaticArg, Task, Tolerance

DESCRIPTION = (
    "y = relu(((x @ W + b) - 2.0) * 1.5). W is stored (in,out) = (8192,8192) and used directly: x "
    "(4096,8192) @ W, default matmul precision, f32 in/out. subtract_value=2.0 and multiply_value=1.5 are"
    " static floats (they could also be traced). Output (4096,8192) f32."
)

#: Published cost facts at the full scale: GFLOP of the reference as written, minimum bytes moved.
GFLOP = 549.9
MIN_BYTES = 536903680


def matmul_subtract_multiply_relu(x, weight, bias, subtract_value, multiply_value):
    h = jnp.dot(x, weight) + bias
    return jnp.maximum((h - subtract_value) * multiply_value, 0.0)


TASK = Task(
    name="19k_Matmul_Subtract_Multiply_ReLU",
    reference=matmul_subtract_multiply_relu,
    args=(
        ArgSpec("x", ("B", "K"), "float32", Init("uniform", low=0.0, high=1.0)),
        ArgSpec("weight", ("K", "N"), "float32", Init("normal", std=0.02)),
        ArgSpec("bias", ("N",), "float32", Init("normal", std=0.02)),
    ),
    static=(
        StaticArg("subtract_value", 2.0),
        StaticArg("multiply_value", 1.5),
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
