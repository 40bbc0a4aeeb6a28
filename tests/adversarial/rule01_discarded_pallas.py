# Rule 1: a real pallas_call is traced (so it is in the jaxpr), but its result is thrown away and the
# answer comes from plain jnp. Stopped by: the worker removes dead code before looking for the pallas_call.
# Task: adv_rmsnorm, target tpu. Expected verdict: rejected, reason contains "no pallas_call in the candidate's jaxpr".
import jax
import jax.numpy as jnp
from jax.experimental import pallas as pl


def _copy(x_ref, o_ref):
    o_ref[...] = x_ref[...]


def kernel(x, w, eps=1e-6):
    _ = pl.pallas_call(_copy, out_shape=jax.ShapeDtypeStruct(x.shape, x.dtype))(x)
    return x * jax.lax.rsqrt(jnp.mean(x * x, axis=-1, keepdims=True) + eps) * w
