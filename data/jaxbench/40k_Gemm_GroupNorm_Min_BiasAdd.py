"""40k_Gemm_GroupNorm_Min_BiasAdd.

GEMM, GroupNorm(512), row min, broadcast-add a channel bias.
Source: KernelBench Level-2 #75 Gemm_GroupNorm_Min_BiasAdd (JaxBench).
mk's own implementation, written from the published task facts; the full
semantics are in ``DESCRIPTION``.
"""

from __future__ import annotations

import jax.numpy as jnp

from mk.task import ArgSpec, Init, Scale, Task, Tolerance

DESCRIPTION = (
    "h = x @ W^T + linear_bias, with W (out,in) = (8192,8192) and default matmul precision, f32 in/out. "
    "GroupNorm with 512 groups of 16 consecutive features: per row and group, mean and biased var "
    "(jnp.var), (h-mu)/sqrt(var+1e-5), then *gn_weight + gn_bias (ones/zeros). m = min over all 8192 "
    "features with keepdims, giving (4096,1); reshape to (1,1,4096,1); out = m + bias, where bias has "
    "shape (1,8192,1,1). Broadcasting gives out[0,c,n,0] = m[n] + bias[c], shape (1,8192,4096,1) f32 (128"
    " MiB). Quirk: the broadcast to (1,C,N,1) is inherited from the original PyTorch problem; the output "
    "is an outer sum of two vectors. mk note: the group count (512) is hard-coded, so N must be a "
    "multiple of 512 (the ci scale keeps N = 8192 and 16 features per group with a small batch and K; "
    "GroupNorm makes the output insensitive to K)."
)

#: Published cost facts at the full scale: GFLOP of the reference as written, minimum bytes moved.
GFLOP = 550.2
MIN_BYTES = 537001984


NUM_GROUPS = 512


def gemm_group_norm_min_bias_add(x, weight, linear_bias, gn_weight, gn_bias, bias):
    h = jnp.dot(x, weight.T) + linear_bias
    b, n = h.shape
    g = h.reshape(b, NUM_GROUPS, n // NUM_GROUPS)
    mu = jnp.mean(g, axis=-1, keepdims=True)
    var = jnp.var(g, axis=-1, keepdims=True)
    h = ((g - mu) / jnp.sqrt(var + 1e-5)).reshape(b, n)
    h = h * gn_weight + gn_bias
    m = jnp.min(h, axis=1, keepdims=True)
    return m.reshape(1, 1, b, 1) + bias


TASK = Task(
    name="40k_Gemm_GroupNorm_Min_BiasAdd",
    reference=gemm_group_norm_min_bias_add,
    args=(
        ArgSpec("x", ("B", "K"), "float32", Init("uniform", low=0.0, high=1.0)),
        ArgSpec("weight", ("N", "K"), "float32", Init("normal", std=0.02)),
        ArgSpec("linear_bias", ("N",), "float32", Init("normal", std=0.02)),
        ArgSpec("gn_weight", ("N",), "float32", Init("ones")),
        ArgSpec("gn_bias", ("N",), "float32", Init("zeros")),
        ArgSpec("bias", (1, "N", 1, 1), "float32", Init("normal", std=0.02)),
    ),
    static=(),
    tolerance=Tolerance(atol=0.01, rtol=0.01),
    scales={
        "full": Scale("full", dims={"B": 4096, "K": 8192, "N": 8192}),
        "ci": Scale("ci", dims={"B": 8, "K": 256, "N": 8192}),
    },
    description=DESCRIPTION,
    kind="builtin",
    default_scale="full",
)
