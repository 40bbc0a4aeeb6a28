"""44k_Matmul_Divide_GELU.

tanh-GELU of (x @ W + b) / divisor.
Source: KernelBench Level-2 #86 Matmul_Divide_GELU (JaxBench).
mk's own implementation, written from the published task facts; the full
semantics are in ``DESCRIPTION``.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp

from mk.task import ArgSpec, Init, Scale, StaticArg, Task, Tolerance

DESCRIPTION = (
    "h = (x @ W + b) / 10.0, with W stored (in,out) = (8192,8192), default matmul precision, f32 in/out "
    "and static divisor=10.0. out = GELU via the jax.nn.gelu default (approximate=True): "
    "0.5*h*(1+tanh(sqrt(2/pi)*(h+0.044715*h^3))). Output (4096,8192) f32."
)

#: Published cost facts at the full scale: GFLOP of the reference as written, minimum bytes moved.
GFLOP = 550.1
MIN_BYTES = 536903680


def matmul_divide_gelu(x, weight, bias, divisor):
    h = (jnp.dot(x, weight) + bias) / divisor
    return jax.nn.gelu(h)


TASK = Task(
    name="44k_Matmul_Divide_GELU",
    reference=matmul_divide_gelu,
    args=(
        ArgSpec("x", ("B", "K"), "float32", Init("uniform", low=0.0, high=1.0)),
        ArgSpec("weight", ("K", "N"), "float32", Init("normal", std=0.02)),
        ArgSpec("bias", ("N",), "float32", Init("normal", std=0.02)),
    ),
    static=(
        StaticArg("divisor", 10.0),
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
