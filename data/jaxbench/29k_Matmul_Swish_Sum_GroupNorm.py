"""29k_Matmul_Swish_Sum_GroupNorm.

swish(x @ W) + b, then GroupNorm over feature groups.
Source: KernelBench Level-2 #37 Matmul_Swish_Sum_GroupNorm (JaxBench).
mk's own implementation, written from the published task facts; the full
semantics are in ``DESCRIPTION``.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp

from mk.task import ArgSpec, Init, Scale, StaticArg, Task, Tolerance

DESCRIPTION = (
    "h = x @ W, with W stored (in,out) = (4096,4096), default matmul precision, f32 in/out and NO bias "
    "yet. h = sigmoid(h)*h (swish). h = h + bias. GroupNorm over features: h is reshaped to (8192, 64 "
    "groups, 64 consecutive features), mean and biased var (jnp.var) per group, (h-mu)/sqrt(var+1e-5), "
    "reshape back, then *gn_weight + gn_bias (ones/zeros). Output (8192,4096) f32. Static num_groups=64 "
    "and out_features=4096 are used in a reshape, so they must be static. mk note: num_groups and "
    "out_features feed a reshape and must stay static; out_features must equal N (the ci scale overrides "
    "both, keeping 64 features per group)."
)

#: Published cost facts at the full scale: GFLOP of the reference as written, minimum bytes moved.
GFLOP = 275.3
MIN_BYTES = 335593472


def matmul_swish_sum_group_norm(x, weight, bias, gn_weight, gn_bias, num_groups, out_features):
    h = jnp.dot(x, weight)
    h = jax.nn.sigmoid(h) * h
    h = h + bias
    g = h.reshape(-1, num_groups, out_features // num_groups)
    mu = jnp.mean(g, axis=-1, keepdims=True)
    var = jnp.var(g, axis=-1, keepdims=True)
    h = ((g - mu) / jnp.sqrt(var + 1e-5)).reshape(-1, out_features)
    return h * gn_weight + gn_bias


TASK = Task(
    name="29k_Matmul_Swish_Sum_GroupNorm",
    reference=matmul_swish_sum_group_norm,
    args=(
        ArgSpec("x", ("B", "K"), "float32", Init("uniform", low=0.0, high=1.0)),
        ArgSpec("weight", ("K", "N"), "float32", Init("normal", std=0.02)),
        ArgSpec("bias", ("N",), "float32", Init("normal", std=0.02)),
        ArgSpec("gn_weight", ("N",), "float32", Init("ones")),
        ArgSpec("gn_bias", ("N",), "float32", Init("zeros")),
    ),
    static=(
        StaticArg("num_groups", 64),
        StaticArg("out_features", 4096),
    ),
    tolerance=Tolerance(atol=0.01, rtol=0.01),
    scales={
        "full": Scale("full", dims={"B": 8192, "K": 4096, "N": 4096}),
        "ci": Scale("ci", dims={"B": 16, "K": 4096, "N": 256}, static={"num_groups": 4, "out_features": 256}),
    },
    description=DESCRIPTION,
    kind="builtin",
    default_scale="full",
)
