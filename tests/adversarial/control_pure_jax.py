# Control: an honest pure-JAX rewrite (no Pallas), evaluated on target cpu.
# Rule: all. Expected verdict: correct.
import jax.numpy as jnp
from jax import lax


def kernel(x, w, eps: float = 1e-6):
    xf = x.astype(jnp.float32)
    inv = lax.rsqrt(jnp.mean(xf * xf, axis=-1, keepdims=True) + eps)
    return (xf * inv * w.astype(jnp.float32)).astype(x.dtype)
