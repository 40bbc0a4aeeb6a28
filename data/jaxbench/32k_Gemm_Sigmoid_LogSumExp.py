"""32k_Gemm_Sigmoid_LogSumExp.

two-layer MLP (sigmoid hidden), then a row logsumexp.
Source: KernelBench Level-2 #45 Gemm_Sigmoid_LogSumExp (JaxBench).
mk's own implementation, written from the published task facts; the full
semantics are in ``DESCRIPTION``.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp

from mk.task import ArgSpec, Init, Scale, Task, Tolerance

DESCRIPTION = (
    "A two-layer MLP followed by a row logsumexp. h = sigmoid(x @ w1^T + b1), with w1 (4096,2048), x "
    "(16384,2048) and default matmul precision, f32 in/out. z = h @ w2^T + b2, with w2 (1024,4096). out ="
    " logsumexp(z, axis=1), WITHOUT keepdims, computed stably by jax.scipy.special.logsumexp as max + "
    "log(sum(exp(z-max))). Output (16384,) f32."
)

#: Published cost facts at the full scale: GFLOP of the reference as written, minimum bytes moved.
GFLOP = 412.7
MIN_BYTES = 184635392


def gemm_sigmoid_logsumexp(x, w1, b1, w2, b2):
    h = jax.nn.sigmoid(jnp.dot(x, w1.T) + b1)
    z = jnp.dot(h, w2.T) + b2
    return jax.scipy.special.logsumexp(z, axis=1)


TASK = Task(
    name="32k_Gemm_Sigmoid_LogSumExp",
    reference=gemm_sigmoid_logsumexp,
    args=(
        ArgSpec("x", ("B", "K"), "float32", Init("uniform", low=0.0, high=1.0)),
        ArgSpec("w1", ("H", "K"), "float32", Init("normal", std=0.02)),
        ArgSpec("b1", ("H",), "float32", Init("normal", std=0.02)),
        ArgSpec("w2", ("O", "H"), "float32", Init("normal", std=0.02)),
        ArgSpec("b2", ("O",), "float32", Init("normal", std=0.02)),
    ),
    static=(),
    tolerance=Tolerance(atol=0.01, rtol=0.01),
    scales={
        "full": Scale("full", dims={"B": 16384, "K": 2048, "H": 4096, "O": 1024}),
        "ci": Scale("ci", dims={"B": 8, "K": 2048, "H": 4096, "O": 64}),
    },
    description=DESCRIPTION,
    kind="builtin",
    default_scale="full",
)
