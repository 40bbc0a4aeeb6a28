"""RMSNorm over the last axis, as in Llama: y = x / sqrt(mean(x^2) + eps) * w.

An mk task module: `mk optimize examples/rmsnorm.py`, `mk eval examples/rmsnorm.py kernel.py`.
"""

import jax
import jax.numpy as jnp

from mk.task import ArgSpec, Init, Scale, StaticArg, Task, Tolerance


def rmsnorm(x, weight, eps):
    x32 = x.astype(jnp.float32)
    inv = jax.lax.rsqrt(jnp.mean(x32 * x32, axis=-1, keepdims=True) + eps)
    return (x32 * inv * weight).astype(x.dtype)


TASK = Task(
    name="rmsnorm",
    reference=rmsnorm,
    args=(
        ArgSpec("x", ("batch", "seq", "hidden"), "bfloat16", Init("normal")),
        ArgSpec("weight", ("hidden",), "float32", Init("normal", mean=1.0, std=0.1)),
    ),
    static=(StaticArg("eps", 1e-6),),
    tolerance=Tolerance(atol=2e-2, rtol=2e-2),
    scales={
        "full": Scale("full", dims={"batch": 8, "seq": 2048, "hidden": 4096}),
        "ci": Scale("ci", dims={"batch": 2, "seq": 64, "hidden": 256}),
    },
    description="RMSNorm with a learned scale; f32 statistics, bf16 in and out.",
)
