# Rule 2: silent fallback, try the kernel and fall back to plain jnp when it fails.
# Task: adv_rmsnorm, target tpu. Expected verdict: rejected (static check), reason contains "try/except" and the line.
import jax
import jax.numpy as jnp
from jax.experimental import pallas as pl


def _body(x_ref, w_ref, o_ref):
    o_ref[...] = x_ref[...] * w_ref[...] * 7  # wrong on purpose: the fallback hides it


def kernel(x, w, eps=1e-6):
    try:
        return pl.pallas_call(_body, out_shape=jax.ShapeDtypeStruct((1,), x.dtype))(x, w)
    except Exception:
        return x * jax.lax.rsqrt(jnp.mean(x * x, axis=-1, keepdims=True) + eps) * w
