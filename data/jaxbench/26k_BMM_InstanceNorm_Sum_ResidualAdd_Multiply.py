"""26k_BMM_InstanceNorm_Sum_ResidualAdd_Multiply.

GEMM, InstanceNorm over singleton axes (exactly 0), then (z + y) * y.
Source: KernelBench Level-2 #28 BMM_InstanceNorm_Sum_ResidualAdd_Multiply (JaxBench).
mk's own implementation, written from the published task facts; the full
semantics are in ``DESCRIPTION``.
"""

from __future__ import annotations

import jax.numpy as jnp

from mk.task import ArgSpec, Init, Scale, Task, Tolerance

DESCRIPTION = (
    "h = x @ bmm_weight^T + bmm_bias, with bmm_weight (out,in) = (8192,8192) and default matmul "
    "precision, f32 in/out. h is reshaped to (4096,8192,1,1) and 'InstanceNorm' is applied over the two "
    "singleton spatial axes: mean = h, var = 0, so (h-mean)/sqrt(0+1e-5) is exactly 0. Then *in_weight[c]"
    " + in_bias[c] (in_weight = 1), squeeze, z = z + y, z = z * y. Output (4096,8192) f32, which equals "
    "exactly (in_bias[j] + y[b,j]) * y[b,j] (verified). Quirk: the GEMM and x are dead computation; XLA "
    "still performs the GEMM. mk note: the output does not depend on x, bmm_weight or bmm_bias (the "
    "normalised singleton is exactly 0)."
)

#: Published cost facts at the full scale: GFLOP of the reference as written, minimum bytes moved.
GFLOP = 550.2
MIN_BYTES = 671186944


def bmm_instance_norm_sum_residual_multiply(x, y, bmm_weight, bmm_bias, in_weight, in_bias):
    h = jnp.dot(x, bmm_weight.T) + bmm_bias
    h = h[:, :, None, None]
    mu = jnp.mean(h, axis=(2, 3), keepdims=True)
    var = jnp.var(h, axis=(2, 3), keepdims=True)
    h = (h - mu) / jnp.sqrt(var + 1e-5)
    h = h * in_weight[None, :, None, None] + in_bias[None, :, None, None]
    z = h[:, :, 0, 0]
    z = z + y
    return z * y


TASK = Task(
    name="26k_BMM_InstanceNorm_Sum_ResidualAdd_Multiply",
    reference=bmm_instance_norm_sum_residual_multiply,
    args=(
        ArgSpec("x", ("B", "K"), "float32", Init("uniform", low=0.0, high=1.0)),
        ArgSpec("y", ("B", "N"), "float32", Init("uniform", low=0.0, high=1.0)),
        ArgSpec("bmm_weight", ("N", "K"), "float32", Init("normal", std=0.02)),
        ArgSpec("bmm_bias", ("N",), "float32", Init("normal", std=0.02)),
        ArgSpec("in_weight", ("N",), "float32", Init("ones")),
        ArgSpec("in_bias", ("N",), "float32", Init("normal", std=0.02)),
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
