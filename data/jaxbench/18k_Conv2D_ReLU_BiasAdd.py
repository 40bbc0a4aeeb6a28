"""18k_Conv2D_ReLU_BiasAdd.

Conv2d (VALID) + conv bias, ReLU, then a per-channel bias.
Source: KernelBench Level-2 #1 Conv2D_ReLU_BiasAdd (JaxBench).
mk's own implementation, written from the published task facts; the full
semantics are in ``DESCRIPTION``.
"""

from __future__ import annotations

import jax.numpy as jnp
from jax import lax

from mk.task import ArgSpec, Init, Scale, Task, Tolerance

DESCRIPTION = (
    "Conv2d followed by ReLU and a channel bias. x is NCHW (128,64,128,128) f32 and weight is OIHW "
    "(128,64,3,3). x is transposed to NHWC and the kernel to HWIO, then conv_general_dilated with stride "
    "1, VALID padding (no pad), no dilation, groups=1, default matmul precision, f32 in/out "
    "(cross-correlation as in PyTorch). Then + conv_bias[c], relu, transpose back to NCHW, and + "
    "bias[c,0,0] (shape (128,1,1), broadcast per channel). out[n,c,h,w] = relu(sum_{ci,kh,kw} "
    "x[n,ci,h+kh,w+kw]*W[c,ci,kh,kw] + conv_bias[c]) + bias[c]. Output (128,128,126,126) f32."
)

#: Published cost facts at the full scale: GFLOP of the reference as written, minimum bytes moved.
GFLOP = 300.4
MIN_BYTES = 1577616384


def conv2d_relu_bias_add(x, weight, conv_bias, bias):
    """x NCHW, weight OIHW; computed in NHWC/HWIO, returned NCHW."""
    y = lax.conv_general_dilated(
        jnp.transpose(x, (0, 2, 3, 1)),
        jnp.transpose(weight, (2, 3, 1, 0)),
        window_strides=(1, 1),
        padding="VALID",
        dimension_numbers=("NHWC", "HWIO", "NHWC"),
    )
    y = jnp.maximum(y + conv_bias, 0.0)
    return jnp.transpose(y, (0, 3, 1, 2)) + bias


TASK = Task(
    name="18k_Conv2D_ReLU_BiasAdd",
    reference=conv2d_relu_bias_add,
    args=(
        ArgSpec("x", ("N", "Cin", "H", "W"), "float32", Init("uniform", low=0.0, high=1.0)),
        ArgSpec("weight", ("Cout", "Cin", 3, 3), "float32", Init("normal", std=0.02)),
        ArgSpec("conv_bias", ("Cout",), "float32", Init("normal", std=0.02)),
        ArgSpec("bias", ("Cout", 1, 1), "float32", Init("normal", std=0.02)),
    ),
    static=(),
    tolerance=Tolerance(atol=0.01, rtol=0.01),
    scales={
        "full": Scale("full", dims={"N": 128, "Cin": 64, "H": 128, "W": 128, "Cout": 128}),
        "ci": Scale("ci", dims={"N": 2, "Cin": 64, "H": 10, "W": 9, "Cout": 8}),
    },
    description=DESCRIPTION,
    kind="builtin",
    default_scale="full",
)
