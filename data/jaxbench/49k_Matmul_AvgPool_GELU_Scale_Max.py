"""49k_Matmul_AvgPool_GELU_Scale_Max.

GEMM, AvgPool1d(16) over features, tanh-GELU, scale, row max.
Source: KernelBench Level-2 #98 Matmul_AvgPool_GELU_Scale_Max (JaxBench).
mk's own implementation, written from the published task facts; the full
semantics are in ``DESCRIPTION``.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
from jax import lax

from mk.task import ArgSpec, Init, Scale, StaticArg, Task, Tolerance

DESCRIPTION = (
    "h = x @ W + b, with W stored (in,out) = (8192,8192) and default matmul precision, f32 in/out. "
    "AvgPool1d with kernel = stride = 16 over features, non-overlapping and VALID: p[b,i] = "
    "(sum_{j=16i}^{16i+15} h[b,j]) / 16, giving (4096,512). The reference implements this as a "
    "lax.reduce_window sum followed by /16. g = GELU via the jax.nn.gelu default (approximate=True): "
    "0.5*h*(1+tanh(sqrt(2/pi)*(h+0.044715*h^3))); g = g * 2.0; out = max over the 512 pooled features, "
    "WITHOUT keepdims. Output (4096,) f32. Static pool_kernel_size=16 is used in window_dimensions, so it"
    " must be static. mk note: pool_kernel_size sets the reduce_window window and must stay static."
)

#: Published cost facts at the full scale: GFLOP of the reference as written, minimum bytes moved.
GFLOP = 549.8
MIN_BYTES = 402702336


def matmul_avgpool_gelu_scale_max(x, weight, bias, pool_kernel_size, scale_factor):
    h = jnp.dot(x, weight) + bias
    p = lax.reduce_window(
        h, 0.0, lax.add, (1, pool_kernel_size), (1, pool_kernel_size), "VALID"
    ) / pool_kernel_size
    g = jax.nn.gelu(p) * scale_factor
    return jnp.max(g, axis=1)


TASK = Task(
    name="49k_Matmul_AvgPool_GELU_Scale_Max",
    reference=matmul_avgpool_gelu_scale_max,
    args=(
        ArgSpec("x", ("B", "K"), "float32", Init("uniform", low=0.0, high=1.0)),
        ArgSpec("weight", ("K", "N"), "float32", Init("normal", std=0.02)),
        ArgSpec("bias", ("N",), "float32", Init("normal", std=0.02)),
    ),
    static=(
        StaticArg("pool_kernel_size", 16),
        StaticArg("scale_factor", 2.0),
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
