# Rule 1: a kernel was asked for (target tpu) but the candidate is plain jax.numpy.
# Task: adv_rmsnorm. Expected verdict: rejected (static check), reason contains "no pallas_call".
import jax.numpy as jnp


def kernel(x, w, eps=1e-6):
    return x * jnp.reciprocal(jnp.sqrt(jnp.mean(x * x, axis=-1, keepdims=True) + eps)) * w
