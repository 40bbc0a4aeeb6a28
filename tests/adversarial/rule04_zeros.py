# Rule 4: return zeros, which pass the task's loose tolerance (atol 0.1 on outputs of size <= 0.05).
# Task: adv_small (loose tolerance), target cpu. Expected verdict: incorrect, reason contains "uncorrelated".
import jax.numpy as jnp


def kernel(x):
    return jnp.zeros_like(x)
