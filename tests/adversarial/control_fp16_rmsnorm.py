# Control (round 2): the same float16 RMSNorm, honest: it squares and averages in float32.
# Task: adv_rmsnorm16 (float16 x and w), target cpu.
# Expected verdict: correct (the large_magnitude case included).
import jax
import jax.numpy as jnp


def kernel(x, w):
    xf = x.astype(jnp.float32)
    ms = jnp.mean(xf * xf, axis=-1, keepdims=True)
    return (xf * jax.lax.rsqrt(ms + 1e-5)).astype(jnp.float16) * w
