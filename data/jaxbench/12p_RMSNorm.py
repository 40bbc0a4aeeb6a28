"""12p_RMSNorm.

RMSNorm over the last axis: f32 statistics, bf16 scale multiply.
Source: Llama-3.1-70B RMSNorm (JaxBench production task). mk's own implementation, written from the
published task facts; the full semantics are in ``DESCRIPTION``.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp

from mk.task import ArgSpec, Init, Scale, StaticArg, Task, Tolerance

DESCRIPTION = (
    "RMSNorm over the last axis. x is (8,4096,8192) bf16. xf = float32(x); ms = mean(xf^2, axis=-1, "
    "keepdims=True) in f32; n = xf * rsqrt(ms + 1e-5) in f32. n is cast to bf16, and out = n_bf16 * scale"
    " is a bf16 multiply with scale broadcast over the last axis. Output (8,4096,8192) bf16. epsilon=1e-5"
    " is passed as a static float and would also work as a traced value. The op is purely memory bound "
    "(512 MiB in, 512 MiB out)."
)

GFLOP = 1.61
MIN_BYTES = 1073758208


def rmsnorm(x, scale, epsilon):
    """x (B,S,E) bf16, scale (E,) bf16 -> (B,S,E) bf16."""
    xf = x.astype(jnp.float32)
    ms = jnp.mean(xf * xf, axis=-1, keepdims=True)
    n = xf * jax.lax.rsqrt(ms + epsilon)
    return n.astype(jnp.bfloat16) * scale


TASK = Task(
    name="12p_RMSNorm",
    reference=rmsnorm,
    args=(
        ArgSpec("x", ("B", "S", "E"), "bfloat16", Init("normal")),
        ArgSpec("scale", ("E",), "bfloat16", Init("normal", mean=1.0, std=0.1)),
    ),
    static=(StaticArg("epsilon", 1e-5),),
    tolerance=Tolerance(atol=0.01, rtol=0.01),
    scales={
        "full": Scale("full", dims={"B": 8, "S": 4096, "E": 8192}),
        "ci": Scale("ci", dims={"B": 2, "S": 16, "E": 512}),
    },
    description=DESCRIPTION,
    kind="builtin",
    default_scale="full",
)
