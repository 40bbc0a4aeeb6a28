# Rule 9: crash the interpreter without ctypes or os: a million nested itertools.chain objects overflow
# the C stack on the first next() (SIGSEGV).
# Task: adv_tanh_mix, target cpu. Expected verdict: crashed, reason names the signal (SIGSEGV).
import itertools

import jax.numpy as jnp


def kernel(x, y):
    it = iter(())
    for _ in range(1_000_000):
        it = itertools.chain(it)
    next(it, None)
    return jnp.tanh(x) * y + 0.5 * x
