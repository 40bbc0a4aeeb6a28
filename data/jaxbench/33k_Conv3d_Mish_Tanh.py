"""33k_Conv3d_Mish_Tanh.

Conv3d (VALID) + bias, naive Mish, tanh.
Source: KernelBench Level-2 #47 Conv3d_Mish_Tanh (JaxBench).
mk's own implementation, written from the published task facts; the full
semantics are in ``DESCRIPTION``.
"""

from __future__ import annotations

import jax.numpy as jnp
from jax import lax

from mk.task import ArgSpec, Init, Scale, Task, Tolerance

DESCRIPTION = (
    "Conv3d: x NCDHW (16,32,32,64,64) and W OIDHW (64,32,3,3,3), run as an NDHWC/DHWIO conv with stride "
    "1, zero padding (VALID) and default matmul precision, f32 in/out, then + bias[c]. Mish is written "
    "naively as h*tanh(log(1+exp(h))), with no stable softplus; then out = tanh(mish) and transpose to "
    "NCDHW. Output (16,64,30,62,62) f32. mk note: the softplus inside Mish is the naive log(1 + exp(h)), "
    "which overflows to inf for h > ~88 (the mish then equals h there) and loses precision for very "
    "negative h."
)

#: Published cost facts at the full scale: GFLOP of the reference as written, minimum bytes moved.
GFLOP = 204.4
MIN_BYTES = 741007616


def conv3d_mish_tanh(x, weight, bias):
    """x NCDHW, weight OIDHW; the conv runs as NDHWC/DHWIO."""
    y = lax.conv_general_dilated(
        jnp.transpose(x, (0, 2, 3, 4, 1)),
        jnp.transpose(weight, (2, 3, 4, 1, 0)),
        window_strides=(1, 1, 1),
        padding="VALID",
        dimension_numbers=("NDHWC", "DHWIO", "NDHWC"),
    )
    y = y + bias
    y = y * jnp.tanh(jnp.log(1.0 + jnp.exp(y)))
    return jnp.transpose(jnp.tanh(y), (0, 4, 1, 2, 3))


TASK = Task(
    name="33k_Conv3d_Mish_Tanh",
    reference=conv3d_mish_tanh,
    args=(
        ArgSpec("x", ("N", "Cin", "D", "H", "W"), "float32", Init("uniform", low=0.0, high=1.0)),
        ArgSpec("weight", ("Cout", "Cin", 3, 3, 3), "float32", Init("normal", std=0.02)),
        ArgSpec("bias", ("Cout",), "float32", Init("normal", std=0.02)),
    ),
    static=(),
    tolerance=Tolerance(atol=0.01, rtol=0.01),
    scales={
        "full": Scale("full", dims={"N": 16, "Cin": 32, "D": 32, "H": 64, "W": 64, "Cout": 64}),
        "ci": Scale("ci", dims={"N": 2, "Cin": 32, "D": 5, "H": 6, "W": 7, "Cout": 8}),
    },
    description=DESCRIPTION,
    kind="builtin",
    default_scale="full",
)
