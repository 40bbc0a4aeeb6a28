"""34k_Conv2d_Activation_BatchNorm.

Conv2d (VALID) + bias, Mish, training-mode BatchNorm.
Source: KernelBench Level-2 #52 Conv2d_Activation_BatchNorm (JaxBench).
mk's own implementation, written from the published task facts; the full
semantics are in ``DESCRIPTION``.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
from jax import lax

from mk.task import ArgSpec, Init, Scale, Task, Tolerance

DESCRIPTION = (
    "Conv2d: x NCHW (64,64,128,128) and W OIHW (128,64,3,3), run through NHWC/HWIO with stride 1, VALID "
    "padding and default matmul precision, f32 in/out, then + conv_bias, transposed to NCHW "
    "(64,128,126,126). Activation: h = tanh(softplus(h)) * h (Mish, softplus = logaddexp(h,0)). BatchNorm"
    " in TRAINING mode: per channel, mu = mean over (N,H,W) and var = mean((h-mu)^2) (biased); h = "
    "(h-mu)/sqrt(var+1e-5)*bn_weight[c] + bn_bias[c] (ones/zeros). Output (64,128,126,126) f32. "
    "conv_weight and conv_bias are UNSCALED N(0,1), so the conv outputs have std of about 14; the "
    "tolerance is atol 0.1."
)

#: Published cost facts at the full scale: GFLOP of the reference as written, minimum bytes moved.
GFLOP = 151.9
MIN_BYTES = 788956672


def conv2d_activation_batch_norm(x, conv_weight, conv_bias, bn_weight, bn_bias):
    y = lax.conv_general_dilated(
        jnp.transpose(x, (0, 2, 3, 1)),
        jnp.transpose(conv_weight, (2, 3, 1, 0)),
        window_strides=(1, 1),
        padding="VALID",
        dimension_numbers=("NHWC", "HWIO", "NHWC"),
    )
    y = jnp.transpose(y + conv_bias, (0, 3, 1, 2))
    y = jnp.tanh(jax.nn.softplus(y)) * y
    mu = jnp.mean(y, axis=(0, 2, 3), keepdims=True)
    var = jnp.mean((y - mu) ** 2, axis=(0, 2, 3), keepdims=True)
    y = (y - mu) / jnp.sqrt(var + 1e-5)
    return y * bn_weight[None, :, None, None] + bn_bias[None, :, None, None]


TASK = Task(
    name="34k_Conv2d_Activation_BatchNorm",
    reference=conv2d_activation_batch_norm,
    args=(
        ArgSpec("x", ("N", "Cin", "H", "W"), "float32", Init("uniform", low=0.0, high=1.0)),
        ArgSpec("conv_weight", ("Cout", "Cin", 3, 3), "float32", Init("normal", std=1.0)),
        ArgSpec("conv_bias", ("Cout",), "float32", Init("normal", std=1.0)),
        ArgSpec("bn_weight", ("Cout",), "float32", Init("ones")),
        ArgSpec("bn_bias", ("Cout",), "float32", Init("zeros")),
    ),
    static=(),
    tolerance=Tolerance(atol=0.1, rtol=0.01),
    scales={
        "full": Scale("full", dims={"N": 64, "Cin": 64, "H": 128, "W": 128, "Cout": 128}),
        "ci": Scale("ci", dims={"N": 2, "Cin": 64, "H": 10, "W": 9, "Cout": 8}),
    },
    description=DESCRIPTION,
    kind="builtin",
    default_scale="full",
)
