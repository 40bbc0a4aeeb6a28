"""46k_Conv2d_GroupNorm_Tanh_HardSwish_ResidualAdd_LogSumExp.

Conv2d, GroupNorm(16), tanh, HardSwish, residual with the pre-norm conv, channel logsumexp.
Source: KernelBench Level-2 #92 Conv2d_GroupNorm_Tanh_HardSwish_ResidualAdd_LogSumExp (JaxBench).
mk's own implementation, written from the published task facts; the full
semantics are in ``DESCRIPTION``.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
from jax import lax

from mk.task import ArgSpec, Init, Scale, Task, Tolerance

DESCRIPTION = (
    "Conv2d: x NCHW (128,8,128,128) and W OIHW (64,8,3,3), run through NHWC/HWIO with stride 1, VALID "
    "padding and default matmul precision, f32 in/out, then + conv_bias, giving xc in NCHW "
    "(128,64,126,126). GroupNorm with 16 groups of 4 consecutive channels: mean and biased var over "
    "(4,H,W) per sample, (xc-mu)/sqrt(var+1e-5), then *gn_weight[c] + gn_bias[c] (ones/zeros), giving xn."
    " t = tanh(xn); hs = t*min(max(t+3,0),6)/6 (HardSwish); r = xc + hs, a residual that uses the "
    "PRE-norm conv output. out = logsumexp(r, axis=1 (channels), keepdims=True), computed stably by "
    "jax.scipy. Output (128,1,126,126) f32. mk note: the group count (16) is hard-coded, so Cout must be "
    "a multiple of 16."
)

#: Published cost facts at the full scale: GFLOP of the reference as written, minimum bytes moved.
GFLOP = 21.2
MIN_BYTES = 75256576


NUM_GROUPS = 16


def conv2d_group_norm_tanh_hardswish_residual_lse(x, conv_weight, conv_bias, gn_weight, gn_bias):
    y = lax.conv_general_dilated(
        jnp.transpose(x, (0, 2, 3, 1)),
        jnp.transpose(conv_weight, (2, 3, 1, 0)),
        window_strides=(1, 1),
        padding="VALID",
        dimension_numbers=("NHWC", "HWIO", "NHWC"),
    )
    xc = jnp.transpose(y + conv_bias, (0, 3, 1, 2))  # NCHW
    n, c, h, w = xc.shape
    g = xc.reshape(n, NUM_GROUPS, c // NUM_GROUPS, h, w)
    mu = jnp.mean(g, axis=(2, 3, 4), keepdims=True)
    var = jnp.var(g, axis=(2, 3, 4), keepdims=True)
    xn = ((g - mu) / jnp.sqrt(var + 1e-5)).reshape(n, c, h, w)
    xn = xn * gn_weight[None, :, None, None] + gn_bias[None, :, None, None]
    t = jnp.tanh(xn)
    hs = t * jnp.minimum(jnp.maximum(t + 3.0, 0.0), 6.0) / 6.0
    r = xc + hs
    return jax.scipy.special.logsumexp(r, axis=1, keepdims=True)


TASK = Task(
    name="46k_Conv2d_GroupNorm_Tanh_HardSwish_ResidualAdd_LogSumExp",
    reference=conv2d_group_norm_tanh_hardswish_residual_lse,
    args=(
        ArgSpec("x", ("N", "Cin", "H", "W"), "float32", Init("uniform", low=0.0, high=1.0)),
        ArgSpec("conv_weight", ("Cout", "Cin", 3, 3), "float32", Init("normal", std=0.02)),
        ArgSpec("conv_bias", ("Cout",), "float32", Init("normal", std=0.02)),
        ArgSpec("gn_weight", ("Cout",), "float32", Init("ones")),
        ArgSpec("gn_bias", ("Cout",), "float32", Init("zeros")),
    ),
    static=(),
    tolerance=Tolerance(atol=0.01, rtol=0.01),
    scales={
        "full": Scale("full", dims={"N": 128, "Cin": 8, "H": 128, "W": 128, "Cout": 64}),
        "ci": Scale("ci", dims={"N": 2, "Cin": 8, "H": 10, "W": 9, "Cout": 64}),
    },
    description=DESCRIPTION,
    kind="builtin",
    default_scale="full",
)
