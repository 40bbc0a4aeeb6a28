"""24k_Matmul_Scale_ResidualAdd_Clamp_LogSumExp_Mish.

clamped 4x GEMM, row logsumexp, then l * mish(l).
Source: KernelBench Level-2 #22 Matmul_Scale_ResidualAdd_Clamp_LogSumExp_Mish (JaxBench).
mk's own implementation, written from the published task facts; the full
semantics are in ``DESCRIPTION``.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp

from mk.task import ArgSpec, Init, Scale, StaticArg, Task, Tolerance

DESCRIPTION = (
    "h = x @ W^T + b, with W (8192,8192) used transposed and default matmul precision, f32 in/out. h = "
    "h*2.0; h = h + h (4x in total); h = clip(h, -10, 10). l = logsumexp(h, axis=1, keepdims=True), "
    "computed stably by jax.scipy, giving (4096,1). mish(l) = l*tanh(softplus(l)) with softplus = "
    "logaddexp(l, 0). out = l * mish(l) = l^2 * tanh(softplus(l)). Output (4096,1) f32. Static "
    "scale_factor=2.0, clamp_min=-10.0, clamp_max=10.0."
)

#: Published cost facts at the full scale: GFLOP of the reference as written, minimum bytes moved.
GFLOP = 550.0
MIN_BYTES = 402702336


def matmul_scale_residual_clamp_lse_mish(x, weight, bias, scale_factor, clamp_min, clamp_max):
    h = jnp.dot(x, weight.T) + bias
    h = h * scale_factor
    h = h + h
    h = jnp.clip(h, clamp_min, clamp_max)
    l = jax.scipy.special.logsumexp(h, axis=1, keepdims=True)
    mish = l * jnp.tanh(jax.nn.softplus(l))
    return l * mish


TASK = Task(
    name="24k_Matmul_Scale_ResidualAdd_Clamp_LogSumExp_Mish",
    reference=matmul_scale_residual_clamp_lse_mish,
    args=(
        ArgSpec("x", ("B", "K"), "float32", Init("uniform", low=0.0, high=1.0)),
        ArgSpec("weight", ("N", "K"), "float32", Init("normal", std=0.02)),
        ArgSpec("bias", ("N",), "float32", Init("normal", std=0.02)),
    ),
    static=(
        StaticArg("scale_factor", 2.0),
        StaticArg("clamp_min", -10.0),
        StaticArg("clamp_max", 10.0),
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
