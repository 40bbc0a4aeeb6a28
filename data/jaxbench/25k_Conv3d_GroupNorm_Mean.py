"""25k_Conv3d_GroupNorm_Mean.

Conv3d (VALID) + bias, GroupNorm(8 groups), mean per sample.
Source: KernelBench Level-2 #23 Conv3d_GroupNorm_Mean (JaxBench).
mk's own implementation, written from the published task facts; the full
semantics are in ``DESCRIPTION``.
"""

from __future__ import annotations

import jax.numpy as jnp
from jax import lax

from mk.task import ArgSpec, Init, Scale, Task, Tolerance

DESCRIPTION = (
    "Conv3d: x NCDHW (128,3,24,32,32) and W OIDHW (24,3,3,3,3), run through an NDHWC/DHWIO conv with "
    "stride 1, VALID padding and default matmul precision, f32 in/out, then + conv_bias, giving "
    "(128,24,22,30,30). GroupNorm with 8 groups of 3 consecutive channels: mean and biased var over (3 "
    "channels, D, H, W) per sample, xn = (x-mu)/sqrt(var+1e-5), then *gamma[c] + beta[c]. out[n] = mean "
    "over (C,D,H,W), shape (128,) f32. Quirk: gamma = 1 and each group is normalized to mean 0, so out[n]"
    " = mean(beta) up to rounding (-0.0052911 for every n; verified by running the reference), "
    "independent of x and the conv. mk note: the GroupNorm count (8) is hard-coded, so Cout must be a "
    "multiple of 8 at every scale. With gamma = 1 the output is mean(beta) for every sample whatever x "
    "is; the suite's other input distributions (gamma not 1) make it depend on the conv again."
)

#: Published cost facts at the full scale: GFLOP of the reference as written, minimum bytes moved.
GFLOP = 10.5
MIN_BYTES = 37757312


NUM_GROUPS = 8


def conv3d_group_norm_mean(x, weight, conv_bias, gamma, beta):
    """x NCDHW, weight OIDHW; the conv runs as NDHWC/DHWIO."""
    y = lax.conv_general_dilated(
        jnp.transpose(x, (0, 2, 3, 4, 1)),
        jnp.transpose(weight, (2, 3, 4, 1, 0)),
        window_strides=(1, 1, 1),
        padding="VALID",
        dimension_numbers=("NDHWC", "DHWIO", "NDHWC"),
    )
    y = jnp.transpose(y + conv_bias, (0, 4, 1, 2, 3))
    n, c, d, h, w = y.shape
    g = y.reshape(n, NUM_GROUPS, c // NUM_GROUPS, d, h, w)
    mu = jnp.mean(g, axis=(2, 3, 4, 5), keepdims=True)
    var = jnp.var(g, axis=(2, 3, 4, 5), keepdims=True)
    y = ((g - mu) / jnp.sqrt(var + 1e-5)).reshape(n, c, d, h, w)
    y = y * gamma[None, :, None, None, None] + beta[None, :, None, None, None]
    return jnp.mean(y, axis=(1, 2, 3, 4))


TASK = Task(
    name="25k_Conv3d_GroupNorm_Mean",
    reference=conv3d_group_norm_mean,
    args=(
        ArgSpec("x", ("N", "Cin", "D", "H", "W"), "float32", Init("uniform", low=0.0, high=1.0)),
        ArgSpec("weight", ("Cout", "Cin", 3, 3, 3), "float32", Init("normal", std=0.02)),
        ArgSpec("conv_bias", ("Cout",), "float32", Init("normal", std=0.02)),
        ArgSpec("gamma", ("Cout",), "float32", Init("ones")),
        ArgSpec("beta", ("Cout",), "float32", Init("normal", std=0.02)),
    ),
    static=(),
    tolerance=Tolerance(atol=0.01, rtol=0.01),
    scales={
        "full": Scale("full", dims={"N": 128, "Cin": 3, "D": 24, "H": 32, "W": 32, "Cout": 24}),
        "ci": Scale("ci", dims={"N": 2, "Cin": 3, "D": 5, "H": 6, "W": 7, "Cout": 24}),
    },
    description=DESCRIPTION,
    kind="builtin",
    default_scale="full",
)
