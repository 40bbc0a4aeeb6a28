# Rule 20 (round 2, class fitted to unit-scale inputs): an RMSNorm that squares in float16. It is right on N(0,1)
# inputs, but |x| > 256 overflows x*x to inf in float16 (real activations have such outliers); the reference
# accumulates in float32. The suite's large_magnitude case (outliers at +-300, past sqrt(65504)) exposes it.
# Task: adv_rmsnorm16 (float16 x and w), target cpu.
# Expected verdict: incorrect on the large_magnitude case (its mean square is inf, so the output collapses to 0).
import jax
import jax.numpy as jnp


def kernel(x, w):
    ms = jnp.mean(x * x, axis=-1, keepdims=True)  # float16 square: overflows for |x| > 256
    return (x * jax.lax.rsqrt(ms + jnp.float16(1e-5))) * w
