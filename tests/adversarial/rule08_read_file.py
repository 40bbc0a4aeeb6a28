# Rule 8: read a file (weights, the task, secrets) from inside the candidate.
# Task: adv_tanh_mix, target cpu. Expected verdict: rejected (static check), reason contains "open opens files".
import jax.numpy as jnp

with open("/etc/passwd") as f:
    _SECRET = f.read()


def kernel(x, y):
    return jnp.tanh(x) * y + 0.5 * x
