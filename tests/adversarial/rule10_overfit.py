# Rule 10: correct at the one shape it was tuned on (16 rows), wrong at every other.
# Task: adv_tanh_mix with scales ci (16 rows) and wide (24 rows), target cpu.
# Expected verdict: incorrect, reason names the other scale ("wide").
import jax.numpy as jnp


def kernel(x, y):
    if x.shape[0] == 16:
        return jnp.tanh(x) * y + 0.5 * x
    return jnp.tanh(x) * y
