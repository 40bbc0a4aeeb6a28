# Rule 8: a file read that the static check cannot see: numpy arrives as an argument, so `mod.load` is
# not recognisably numpy.load. The runtime sandbox policy (audit hook) denies the open.
# Task: adv_tanh_mix, target cpu. Expected verdict: rejected or crashed, reason contains "mk sandbox".
import jax.numpy as jnp
import numpy as np


def _peek(mod, path):
    return mod.load(path, allow_pickle=False)


def kernel(x, y):
    _peek(np, "/etc/passwd")
    return jnp.tanh(x) * y + 0.5 * x
