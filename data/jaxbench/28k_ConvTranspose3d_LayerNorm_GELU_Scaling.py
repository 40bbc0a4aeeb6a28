"""28k_ConvTranspose3d_LayerNorm_GELU_Scaling.

ConvTranspose3d (stride 2, pad 1, k 4), LayerNorm over W, tanh-GELU, scale.
Source: KernelBench Level-2 #34 ConvTranspose3d_LayerNorm_GELU_Scaling (JaxBench).
mk's own implementation, written from the published task facts; the full
semantics are in ``DESCRIPTION``.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
from jax import lax

from mk.task import ArgSpec, Init, Scale, StaticArg, Task, Tolerance

DESCRIPTION = (
    "ConvTranspose3d with stride 2, padding 1 and kernel 4, implemented as a regular conv on a "
    "zero-dilated input. x NCDHW (32,32,16,32,32) is transposed to NDHWC. conv_weight is in PyTorch "
    "ConvTranspose layout (Cin=32, Cout=64, 4,4,4); it is transposed to (kD,kH,kW,Cout,Cin) = 'DHWOI' and"
    " spatially flipped. x is dilated by inserting stride-1=1 zeros between elements, giving (31,63,63), "
    "padded by k-1-p = 2 on every side, then conv with stride 1 and default matmul precision, f32 in/out "
    "to (32,32,64,64,64) NDHWC. Then + conv_bias (zeros) and transpose to NCDHW (32,64,32,64,64). This is"
    " exactly PyTorch ConvTranspose3d (verified): per spatial dim, out[n,co,o] = sum_ci sum_{i,kk : o = "
    "2*i - 1 + kk} x[n,ci,i]*Wt[ci,co,kk]. LayerNorm is over the LAST axis, which is W (size 64), NOT "
    "channels: mean and biased var over axis -1, (x-mu)/sqrt(var+1e-5), then *ln_weight + ln_bias "
    "(ones/zeros of size 64, broadcast along W). Then GELU with jax.nn.gelu's default tanh approximation,"
    " 0.5x(1+tanh(sqrt(2/pi)(x+0.044715x^3))), and *1.0. Output (32,64,32,64,64) f32 (1 GiB). conv_weight"
    " is UNSCALED N(0,1). The static stride, padding and kernel_size are used in Python slicing and "
    "padding, so they must be static. gflop is for the dilated conv as written (zeros included); a true "
    "transposed conv needs about 137 GFLOP. mk note: LayerNorm runs over the output W axis, so "
    "ln_weight/ln_bias have the output width Wo = (W-1)*stride + kernel_size - 2*padding (= 2*W here), "
    "which equals Cout only by coincidence at full scale. stride, padding and kernel_size shape the "
    "arrays and stay static; kernel_size must match conv_weight."
)

#: Published cost facts at the full scale: GFLOP of the reference as written, minimum bytes moved.
GFLOP = 1004.0
MIN_BYTES = 1141375744


def conv_transpose3d_layer_norm_gelu_scaling(
    x, conv_weight, conv_bias, ln_weight, ln_bias, stride, padding, kernel_size, eps, scaling_factor
):
    """ConvTranspose3d written as a stride-1 conv over the zero-dilated, padded input."""
    xt = jnp.transpose(x, (0, 2, 3, 4, 1))  # NDHWC
    n, d, h, w, c = xt.shape
    dilated = jnp.zeros((n, (d - 1) * stride + 1, (h - 1) * stride + 1, (w - 1) * stride + 1, c), xt.dtype)
    dilated = dilated.at[:, ::stride, ::stride, ::stride, :].set(xt)
    pad = kernel_size - 1 - padding
    dilated = jnp.pad(dilated, ((0, 0), (pad, pad), (pad, pad), (pad, pad), (0, 0)))
    # PyTorch ConvTranspose layout (Cin, Cout, kD, kH, kW) -> (kD, kH, kW, Cout, Cin), spatially flipped.
    kernel = jnp.transpose(conv_weight, (2, 3, 4, 1, 0))[::-1, ::-1, ::-1]
    y = lax.conv_general_dilated(
        dilated,
        kernel,
        window_strides=(1, 1, 1),
        padding="VALID",
        dimension_numbers=("NDHWC", "DHWOI", "NDHWC"),
    )
    y = jnp.transpose(y + conv_bias, (0, 4, 1, 2, 3))  # NCDHW
    mu = jnp.mean(y, axis=-1, keepdims=True)
    var = jnp.var(y, axis=-1, keepdims=True)
    y = (y - mu) / jnp.sqrt(var + eps) * ln_weight + ln_bias
    return jax.nn.gelu(y) * scaling_factor


TASK = Task(
    name="28k_ConvTranspose3d_LayerNorm_GELU_Scaling",
    reference=conv_transpose3d_layer_norm_gelu_scaling,
    args=(
        ArgSpec("x", ("N", "Cin", "D", "H", "W"), "float32", Init("uniform", low=0.0, high=1.0)),
        ArgSpec("conv_weight", ("Cin", "Cout", 4, 4, 4), "float32", Init("normal", std=1.0)),
        ArgSpec("conv_bias", ("Cout",), "float32", Init("zeros")),
        ArgSpec("ln_weight", ("Wo",), "float32", Init("ones")),
        ArgSpec("ln_bias", ("Wo",), "float32", Init("zeros")),
    ),
    static=(
        StaticArg("stride", 2),
        StaticArg("padding", 1),
        StaticArg("kernel_size", 4),
        StaticArg("eps", 1e-05),
        StaticArg("scaling_factor", 1.0),
    ),
    tolerance=Tolerance(atol=0.05, rtol=0.01),
    scales={
        "full": Scale("full", dims={"N": 32, "Cin": 32, "Cout": 64, "D": 16, "H": 32, "W": 32, "Wo": 64}),
        "ci": Scale("ci", dims={"N": 2, "Cin": 32, "Cout": 6, "D": 3, "H": 4, "W": 5, "Wo": 10}),
    },
    description=DESCRIPTION,
    kind="builtin",
    default_scale="full",
)
