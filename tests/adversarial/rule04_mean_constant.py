# Rule 4: return a constant close to the output's mean, within the task's loose tolerance everywhere.
# Task: adv_small (loose tolerance), target cpu. Expected verdict: incorrect, reason contains "uncorrelated".
import jax.numpy as jnp


def kernel(x):
    return jnp.full_like(x, jnp.mean(0.05 * jnp.tanh(x)))
