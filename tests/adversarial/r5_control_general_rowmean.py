# Control (round 5): the honest row mean on the same task as r5_relation_between_dims.py; it is correct at every
# size the strict and the loose fresh size can draw.
# Expected verdict: correct, reason names the fresh sizes.
import jax.numpy as jnp


def kernel(x):
    return jnp.sum(x, axis=-1, keepdims=True) / x.shape[-1] * x
