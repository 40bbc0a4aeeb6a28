# Rule 1: the source mentions pl.pallas_call (so the static check lets it through) but the
# computation never uses it: only the jaxpr check can tell.
# Task: adv_rmsnorm, target tpu. Expected verdict: rejected, reason contains "no pallas_call in the candidate's jaxpr".
import jax
import jax.numpy as jnp
from jax.experimental import pallas as pl


def _unused(x):
    return pl.pallas_call(lambda x_ref, o_ref: None, out_shape=jax.ShapeDtypeStruct(x.shape, x.dtype))(x)


def kernel(x, w, eps=1e-6):
    return x * jax.lax.rsqrt(jnp.mean(x * x, axis=-1, keepdims=True) + eps) * w
