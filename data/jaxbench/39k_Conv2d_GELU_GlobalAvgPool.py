"""39k_Conv2d_GELU_GlobalAvgPool.

Conv2d (VALID) + bias, tanh-GELU, global average pool.
Source: KernelBench Level-2 #67 Conv2d_GELU_GlobalAvgPool (JaxBench).
mk's own implementation, written from the published task facts; the full
semantics are in ``DESCRIPTION``.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
from jax import lax

from mk.task import ArgSpec, Init, Scale, Task, Tolerance

DESCRIPTION = (
    "Conv2d: x NCHW (128,8,256,256) and W OIHW (64,8,3,3), run through NHWC/HWIO with stride 1, VALID "
    "padding and default matmul precision, f32 in/out, giving NHWC (128,254,254,64); then + bias[c]. GELU"
    " uses the jax.nn.gelu default (approximate=True): 0.5*h*(1+tanh(sqrt(2/pi)*(h+0.044715*h^3))). out ="
    " mean over (H,W) = global average pooling. Output (128,64) f32, without the trailing 1x1 dims."
)

#: Published cost facts at the full scale: GFLOP of the reference as written, minimum bytes moved.
GFLOP = 81.4
MIN_BYTES = 268486912


def conv2d_gelu_global_avg_pool(x, weight, bias):
    y = lax.conv_general_dilated(
        jnp.transpose(x, (0, 2, 3, 1)),
        jnp.transpose(weight, (2, 3, 1, 0)),
        window_strides=(1, 1),
        padding="VALID",
        dimension_numbers=("NHWC", "HWIO", "NHWC"),
    )
    y = jax.nn.gelu(y + bias)
    return jnp.mean(y, axis=(1, 2))


TASK = Task(
    name="39k_Conv2d_GELU_GlobalAvgPool",
    reference=conv2d_gelu_global_avg_pool,
    args=(
        ArgSpec("x", ("N", "Cin", "H", "W"), "float32", Init("uniform", low=0.0, high=1.0)),
        ArgSpec("weight", ("Cout", "Cin", 3, 3), "float32", Init("normal", std=0.02)),
        ArgSpec("bias", ("Cout",), "float32", Init("normal", std=0.02)),
    ),
    static=(),
    tolerance=Tolerance(atol=0.01, rtol=0.01),
    scales={
        "full": Scale("full", dims={"N": 128, "Cin": 8, "H": 256, "W": 256, "Cout": 64}),
        "ci": Scale("ci", dims={"N": 2, "Cin": 8, "H": 10, "W": 9, "Cout": 8}),
    },
    description=DESCRIPTION,
    kind="builtin",
    default_scale="full",
)
