# Rule 9: exhaust memory on the host while tracing (1 GiB at a time, never freed).
# Task: adv_tanh_mix, target cpu, small memory limit. Expected verdict: crashed, reason mentions memory.
import jax.numpy as jnp
import numpy as np


def kernel(x, y):
    hoard = []
    for _ in range(256):
        hoard.append(np.ones(1 << 27, dtype=np.float64))
    return jnp.tanh(x) * y + 0.5 * x + hoard[0][0] * 0
