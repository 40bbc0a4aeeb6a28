"""48k_Matmul_BatchNorm_BiasAdd_Divide_Swish.

GEMM, inference BatchNorm, scalar bias, /1, swish.
Source: KernelBench Level-2 #97 Matmul_BatchNorm_BiasAdd_Divide_Swish (JaxBench).
mk's own implementation, written from the published task facts; the full
semantics are in ``DESCRIPTION``.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp

from mk.task import ArgSpec, Init, Scale, Task, Tolerance

DESCRIPTION = (
    "h = x @ W + linear_bias, with W stored (in,out) = (8192,8192) and default matmul precision, f32 "
    "in/out. BatchNorm in INFERENCE mode: h = bn_scale*((h - bn_mean)/sqrt(bn_var + 1e-5)) + bn_bias. The"
    " stats are mean 0, var 1, scale 1 and bias 0, so this is h/sqrt(1.00001). h = h + bias[0] (a scalar "
    "bias of shape (1,)); h = h / 1.0; out = h*sigmoid(h). Output (4096,8192) f32."
)

#: Published cost facts at the full scale: GFLOP of the reference as written, minimum bytes moved.
GFLOP = 550.1
MIN_BYTES = 537034756


def matmul_batch_norm_bias_add_divide_swish(x, weight, linear_bias, bn_scale, bn_bias, bn_mean, bn_var, bias):
    h = jnp.dot(x, weight) + linear_bias
    h = bn_scale * ((h - bn_mean) / jnp.sqrt(bn_var + 1e-5)) + bn_bias
    h = h + bias[0]
    h = h / 1.0
    return h * jax.nn.sigmoid(h)


TASK = Task(
    name="48k_Matmul_BatchNorm_BiasAdd_Divide_Swish",
    reference=matmul_batch_norm_bias_add_divide_swish,
    args=(
        ArgSpec("x", ("B", "K"), "float32", Init("uniform", low=0.0, high=1.0)),
        ArgSpec("weight", ("K", "N"), "float32", Init("normal", std=0.02)),
        ArgSpec("linear_bias", ("N",), "float32", Init("normal", std=0.02)),
        ArgSpec("bn_scale", ("N",), "float32", Init("ones")),
        ArgSpec("bn_bias", ("N",), "float32", Init("zeros")),
        ArgSpec("bn_mean", ("N",), "float32", Init("zeros")),
        ArgSpec("bn_var", ("N",), "float32", Init("ones")),
        ArgSpec("bias", (1,), "float32", Init("normal", std=0.02)),
    ),
    static=(),
    tolerance=Tolerance(atol=0.01, rtol=0.01),
    scales={
        "full": Scale("full", dims={"B": 4096, "K": 8192, "N": 8192}),
        "ci": Scale("ci", dims={"B": 16, "K": 8192, "N": 128}),
    },
    description=DESCRIPTION,
    kind="builtin",
    default_scale="full",
)
