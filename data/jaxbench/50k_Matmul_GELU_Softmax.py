"""50k_Matmul_GELU_Softmax.

softmax of tanh-GELU(x @ W + b).
Source: KernelBench Level-2 #99 Matmul_GELU_Softmax (JaxBench).
mk's own implementation, written from the published task facts; the full
semantics are in ``DESCRIPTION``.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp

from mk.task import ArgSpec, Init, Scale, Task, Tolerance

DESCRIPTION = (
    "h = x @ W + b, with W stored (in,out) = (8192,8192) and default matmul precision, f32 in/out. g = "
    "GELU via the jax.nn.gelu default (approximate=True): 0.5*h*(1+tanh(sqrt(2/pi)*(h+0.044715*h^3))). "
    "out = softmax(g, axis=1) in f32. Output (4096,8192) f32."
)

#: Published cost facts at the full scale: GFLOP of the reference as written, minimum bytes moved.
GFLOP = 550.2
MIN_BYTES = 536903680


def matmul_gelu_softmax(x, weight, bias):
    h = jnp.dot(x, weight) + bias
    return jax.nn.softmax(jax.nn.gelu(h), axis=1)


TASK = Task(
    name="50k_Matmul_GELU_Softmax",
    reference=matmul_gelu_softmax,
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
