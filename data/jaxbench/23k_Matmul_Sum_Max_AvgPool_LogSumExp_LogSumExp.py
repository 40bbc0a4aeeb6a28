"""23k_Matmul_Sum_Max_AvgPool_LogSumExp_LogSumExp.

row sum of x @ W^T + b, then four identity reductions.
Source: KernelBench Level-2 #18 Matmul_Sum_Max_AvgPool_LogSumExp_LogSumExp (JaxBench).
mk's own implementation, written from the published task facts; the full
semantics are in ``DESCRIPTION``.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp

from mk.task import ArgSpec, Init, Scale, Task, Tolerance

DESCRIPTION = (
    "h = x @ W^T + b, with W of shape (8192,8192) used transposed (h[b,j] = sum_k x[b,k]W[j,k]) and "
    "default matmul precision, f32 in/out. s = sum_j h[b,j] with keepdims, giving (4096,1). The following"
    " max, mean, logsumexp and logsumexp all reduce over axis 1 with keepdims on a size-1 axis, so they "
    "are exact identities. logsumexp is computed stably as m + log(sum(exp(x-m))) = x + log(1). Output "
    "(4096,1) f32 = rowsum(x @ W^T + b), which can also be computed as x . colsum(W) + sum(b). mk note: "
    "the max, mean and both logsumexps act on a size-1 axis and are identities; the name promises more "
    "work than the computation does."
)

#: Published cost facts at the full scale: GFLOP of the reference as written, minimum bytes moved.
GFLOP = 549.8
MIN_BYTES = 402702336


def matmul_sum_max_avgpool_lse_lse(x, weight, bias):
    h = jnp.dot(x, weight.T) + bias
    s = jnp.sum(h, axis=1, keepdims=True)
    s = jnp.max(s, axis=1, keepdims=True)
    s = jnp.mean(s, axis=1, keepdims=True)
    s = jax.scipy.special.logsumexp(s, axis=1, keepdims=True)
    return jax.scipy.special.logsumexp(s, axis=1, keepdims=True)


TASK = Task(
    name="23k_Matmul_Sum_Max_AvgPool_LogSumExp_LogSumExp",
    reference=matmul_sum_max_avgpool_lse_lse,
    args=(
        ArgSpec("x", ("B", "K"), "float32", Init("uniform", low=0.0, high=1.0)),
        ArgSpec("weight", ("N", "K"), "float32", Init("normal", std=0.02)),
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
