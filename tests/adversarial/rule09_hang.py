# Rule 9: hang forever while tracing.
# Task: adv_tanh_mix, target cpu. Expected verdict: timeout.
import jax.numpy as jnp


def kernel(x, y):
    n = 0
    while True:
        n += 1
    return jnp.tanh(x) * y + 0.5 * x
