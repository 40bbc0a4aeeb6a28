"""22k_Conv2d_InstanceNorm_Divide.

Conv2d (VALID) + bias, InstanceNorm, divide by a constant.
Source: KernelBench Level-2 #17 Conv2d_InstanceNorm_Divide (JaxBench).
mk's own implementation, written from the published task facts; the full
semantics are in ``DESCRIPTION``.
"""

from __future__ import annotations

import jax.numpy as jnp
from jax import lax

from mk.task import ArgSpec, Init, Scale, StaticArg, Task, Tolerance

DESCRIPTION = (
    "Conv2d: x NCHW (128,64,128,128) and W OIHW (128,64,3,3), run through an NHWC/HWIO "
    "conv_general_dilated with stride 1, VALID padding and default matmul precision, f32 in/out, then + "
    "conv_bias[c], transposed back to NCHW (128,128,126,126). InstanceNorm per (n,c) over (H,W): mu = "
    "mean, var = biased variance (jnp.var, two-pass), xn = (x-mu)/sqrt(var+1e-5); then xn*in_weight[c] + "
    "in_bias[c], with in_weight all 1 and in_bias all 0. Finally divide by divide_by_value=2.0. Output "
    "(128,128,126,126) f32."
)

#: Published cost facts at the full scale: GFLOP of the reference as written, minimum bytes moved.
GFLOP = 302.5
MIN_BYTES = 1577616896


def conv2d_instance_norm_divide(x, weight, conv_bias, in_weight, in_bias, divide_by_value):
    y = lax.conv_general_dilated(
        jnp.transpose(x, (0, 2, 3, 1)),
        jnp.transpose(weight, (2, 3, 1, 0)),
        window_strides=(1, 1),
        padding="VALID",
        dimension_numbers=("NHWC", "HWIO", "NHWC"),
    )
    y = jnp.transpose(y + conv_bias, (0, 3, 1, 2))
    mu = jnp.mean(y, axis=(2, 3), keepdims=True)
    var = jnp.var(y, axis=(2, 3), keepdims=True)
    y = (y - mu) / jnp.sqrt(var + 1e-5)
    y = y * in_weight[None, :, None, None] + in_bias[None, :, None, None]
    return y / divide_by_value


TASK = Task(
    name="22k_Conv2d_InstanceNorm_Divide",
    reference=conv2d_instance_norm_divide,
    args=(
        ArgSpec("x", ("N", "Cin", "H", "W"), "float32", Init("uniform", low=0.0, high=1.0)),
        ArgSpec("weight", ("Cout", "Cin", 3, 3), "float32", Init("normal", std=0.02)),
        ArgSpec("conv_bias", ("Cout",), "float32", Init("normal", std=0.02)),
        ArgSpec("in_weight", ("Cout",), "float32", Init("ones")),
        ArgSpec("in_bias", ("Cout",), "float32", Init("zeros")),
    ),
    static=(
        StaticArg("divide_by_value", 2.0),
    ),
    tolerance=Tolerance(atol=0.01, rtol=0.01),
    scales={
        "full": Scale("full", dims={"N": 128, "Cin": 64, "H": 128, "W": 128, "Cout": 128}),
        "ci": Scale("ci", dims={"N": 2, "Cin": 64, "H": 10, "W": 9, "Cout": 8}),
    },
    description=DESCRIPTION,
    kind="builtin",
    default_scale="full",
)
