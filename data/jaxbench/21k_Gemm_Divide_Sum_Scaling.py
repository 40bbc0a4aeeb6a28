"""21k_Gemm_Divide_Sum_Scaling.

row sum of (x @ W^T) / 2, times scaling_factor, at HIGHEST precision.
Source: KernelBench Level-2 #14 Gemm_Divide_Sum_Scaling (JaxBench).
mk's own implementation, written from the published task facts; the full
semantics are in ``DESCRIPTION``.
"""

from __future__ import annotations

import jax.numpy as jnp
from jax import lax

from mk.task import ArgSpec, Init, Scale, StaticArg, Task, Tolerance

DESCRIPTION = (
    "h[b,j] = sum_k x[b,k]*W[j,k], i.e. x @ W^T via lax.dot_general with precision=lax.Precision.HIGHEST "
    "(full f32). W has shape (8192,8192) and is used transposed. Then h = h / 2.0; s[b] = sum_j h[b,j] "
    "with keepdims; out = s * 1.5. Output (4096,1) f32. The weight is UNSCALED N(0,1), so the outputs are"
    " large (mean |out| of about 1.9e3, max about 7.1e3). The tolerance is 0.1/0.1. Mathematically out[b]"
    " = 0.75 * x[b,:] . colsum(W), where colsum(W)[k] = sum_j W[j,k]: the GEMM can be algebraically "
    "collapsed to a GEMV, but the f32 rounding will differ. mk note: the weight is unscaled N(0,1) and "
    "the GEMM collapses algebraically to a GEMV (0.75 * x . colsum(W)); the f32 rounding of such a "
    "rewrite differs from the HIGHEST-precision GEMM, hence the 0.1/0.1 tolerance."
)

#: Published cost facts at the full scale: GFLOP of the reference as written, minimum bytes moved.
GFLOP = 549.8
MIN_BYTES = 402669568


def gemm_divide_sum_scaling(x, weight, scaling_factor):
    h = lax.dot_general(x, weight, (((1,), (1,)), ((), ())), precision=lax.Precision.HIGHEST)
    h = h / 2.0
    s = jnp.sum(h, axis=1, keepdims=True)
    return s * scaling_factor


TASK = Task(
    name="21k_Gemm_Divide_Sum_Scaling",
    reference=gemm_divide_sum_scaling,
    args=(
        ArgSpec("x", ("B", "K"), "float32", Init("uniform", low=0.0, high=1.0)),
        ArgSpec("weight", ("N", "K"), "float32", Init("normal", std=1.0)),
    ),
    static=(
        StaticArg("scaling_factor", 1.5),
    ),
    tolerance=Tolerance(atol=0.1, rtol=0.1),
    scales={
        "full": Scale("full", dims={"B": 4096, "K": 8192, "N": 8192}),
        "ci": Scale("ci", dims={"B": 16, "K": 8192, "N": 128}),
    },
    description=DESCRIPTION,
    kind="builtin",
    default_scale="full",
)
