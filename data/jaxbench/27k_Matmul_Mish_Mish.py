"""27k_Matmul_Mish_Mish.

Mish applied twice to x @ W + b.
Source: KernelBench Level-2 #29 Matmul_Mish_Mish (JaxBench).
mk's own implementation, written from the published task facts; the full
semantics are in ``DESCRIPTION``.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp

from mk.task import ArgSpec, Init, Scale, Task, Tolerance

DESCRIPTION = (
    "h = x @ W + b, with W stored (in,out) = (8192,8192) and default matmul precision, f32 in/out. Mish "
    "is applied twice: h = h*tanh(softplus(h)), where jax.nn.softplus = logaddexp(h,0), and then the same"
    " again. Output (4096,8192) f32."
)

#: Published cost facts at the full scale: GFLOP of the reference as written, minimum bytes moved.
GFLOP = 550.3
MIN_BYTES = 536903680


def matmul_mish_mish(x, weight, bias):
    h = jnp.dot(x, weight) + bias
    h = h * jnp.tanh(jax.nn.softplus(h))
    return h * jnp.tanh(jax.nn.softplus(h))


TASK = Task(
    name="27k_Matmul_Mish_Mish",
    reference=matmul_mish_mish,
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
