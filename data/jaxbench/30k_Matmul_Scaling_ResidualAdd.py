"""30k_Matmul_Scaling_ResidualAdd.

h * 0.5 + h for h = x @ W + b.
Source: KernelBench Level-2 #40 Matmul_Scaling_ResidualAdd (JaxBench).
mk's own implementation, written from the published task facts; the full
semantics are in ``DESCRIPTION``.
"""

from __future__ import annotations

import jax.numpy as jnp

from mk.task import ArgSpec, Init, Scale, Task, Tolerance

DESCRIPTION = (
    "h = x @ W + b, with W stored (in,out) = (4096,4096) and default matmul precision, f32 in/out. out = "
    "h*0.5 + h, i.e. 1.5*h. x is (16384,4096). Output (16384,4096) f32."
)

#: Published cost facts at the full scale: GFLOP of the reference as written, minimum bytes moved.
GFLOP = 550.0
MIN_BYTES = 603996160


def matmul_scaling_residual_add(x, weight, bias):
    h = jnp.dot(x, weight) + bias
    return h * 0.5 + h


TASK = Task(
    name="30k_Matmul_Scaling_ResidualAdd",
    reference=matmul_scaling_residual_add,
    args=(
        ArgSpec("x", ("B", "K"), "float32", Init("uniform", low=0.0, high=1.0)),
        ArgSpec("weight", ("K", "N"), "float32", Init("normal", std=0.02)),
        ArgSpec("bias", ("N",), "float32", Init("normal", std=0.02)),
    ),
    static=(),
    tolerance=Tolerance(atol=0.01, rtol=0.01),
    scales={
        "full": Scale("full", dims={"B": 16384, "K": 4096, "N": 4096}),
        "ci": Scale("ci", dims={"B": 16, "K": 4096, "N": 128}),
    },
    description=DESCRIPTION,
    kind="builtin",
    default_scale="full",
)
