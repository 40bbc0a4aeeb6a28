"""31k_Gemm_BatchNorm_GELU_ReLU.

GEMM, training-mode BatchNorm over the batch, tanh-GELU, ReLU.
Source: KernelBench Level-2 #41 Gemm_BatchNorm_GELU_ReLU (JaxBench).
mk's own implementation, written from the published task facts; the full
semantics are in ``DESCRIPTION``.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp

from mk.task import ArgSpec, Init, Scale, Task, Tolerance

DESCRIPTION = (
    "h = x @ gemm_weight^T + gemm_bias, with gemm_weight (out,in) = (8192,8192) and default matmul "
    "precision, f32 in/out; x is (16384,8192). BatchNorm in TRAINING mode using batch statistics over "
    "axis 0, per feature: mu = mean_b h, var = mean_b (h-mu)^2 (biased), h = "
    "(h-mu)/sqrt(var+1e-5)*bn_weight + bn_bias (ones/zeros). Then GELU with the jax.nn.gelu default "
    "(approximate=True): 0.5*h*(1+tanh(sqrt(2/pi)*(h+0.044715*h^3))), then relu. Output (16384,8192) f32."
    " The weight and bias are UNSCALED N(0,1). The column statistics need the whole batch before "
    "normalizing."
)

#: Published cost facts at the full scale: GFLOP of the reference as written, minimum bytes moved.
GFLOP = 2201.4
MIN_BYTES = 1342275584


def gemm_batch_norm_gelu_relu(x, gemm_weight, gemm_bias, bn_weight, bn_bias):
    h = jnp.dot(x, gemm_weight.T) + gemm_bias
    mu = jnp.mean(h, axis=0)
    var = jnp.mean((h - mu) ** 2, axis=0)
    h = (h - mu) / jnp.sqrt(var + 1e-5) * bn_weight + bn_bias
    return jnp.maximum(jax.nn.gelu(h), 0.0)


TASK = Task(
    name="31k_Gemm_BatchNorm_GELU_ReLU",
    reference=gemm_batch_norm_gelu_relu,
    args=(
        ArgSpec("x", ("B", "K"), "float32", Init("uniform", low=0.0, high=1.0)),
        ArgSpec("gemm_weight", ("N", "K"), "float32", Init("normal", std=1.0)),
        ArgSpec("gemm_bias", ("N",), "float32", Init("normal", std=1.0)),
        ArgSpec("bn_weight", ("N",), "float32", Init("ones")),
        ArgSpec("bn_bias", ("N",), "float32", Init("zeros")),
    ),
    static=(),
    tolerance=Tolerance(atol=0.05, rtol=0.01),
    scales={
        "full": Scale("full", dims={"B": 16384, "K": 8192, "N": 8192}),
        "ci": Scale("ci", dims={"B": 32, "K": 8192, "N": 128}),
    },
    description=DESCRIPTION,
    kind="builtin",
    default_scale="full",
)
