"""43k_Gemm_BatchNorm_Scaling_Softmax.

GEMM, inference BatchNorm, scalar scale, softmax.
Source: KernelBench Level-2 #84 Gemm_BatchNorm_Scaling_Softmax (JaxBench).
mk's own implementation, written from the published task facts; the full
semantics are in ``DESCRIPTION``.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp

from mk.task import ArgSpec, Init, Scale, Task, Tolerance

DESCRIPTION = (
    "h = x @ W + b, with W stored (in,out) = (8192,8192) and default matmul precision, f32 in/out. "
    "BatchNorm in INFERENCE mode with the given running stats: h = bn_scale * ((h - bn_mean)/sqrt(bn_var "
    "+ 1e-5)) + bn_bias. Here bn_mean=0, bn_var=1 and bn_scale=1, so this is h/sqrt(1.00001) + bn_bias. h"
    " = scale * h, with scale of shape (1,) equal to 1. out = softmax(h, axis=1) in f32. Output "
    "(4096,8192) f32."
)

#: Published cost facts at the full scale: GFLOP of the reference as written, minimum bytes moved.
GFLOP = 550.1
MIN_BYTES = 537034756


def gemm_batch_norm_scaling_softmax(x, weight, bias, bn_scale, bn_bias, bn_mean, bn_var, scale):
    h = jnp.dot(x, weight) + bias
    h = bn_scale * ((h - bn_mean) / jnp.sqrt(bn_var + 1e-5)) + bn_bias
    h = scale * h
    return jax.nn.softmax(h, axis=1)


TASK = Task(
    name="43k_Gemm_BatchNorm_Scaling_Softmax",
    reference=gemm_batch_norm_scaling_softmax,
    args=(
        ArgSpec("x", ("B", "K"), "float32", Init("uniform", low=0.0, high=1.0)),
        ArgSpec("weight", ("K", "N"), "float32", Init("normal", std=0.02)),
        ArgSpec("bias", ("N",), "float32", Init("normal", std=0.02)),
        ArgSpec("bn_scale", ("N",), "float32", Init("ones")),
        ArgSpec("bn_bias", ("N",), "float32", Init("normal", std=0.02)),
        ArgSpec("bn_mean", ("N",), "float32", Init("zeros")),
        ArgSpec("bn_var", ("N",), "float32", Init("ones")),
        ArgSpec("scale", (1,), "float32", Init("ones")),
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
