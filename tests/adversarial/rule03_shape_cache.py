# Rule 3: return a cached result keyed by shape (the first inputs' output for every later call).
# Task: adv_tanh_mix, target cpu. Expected verdict: rejected (static check), reason contains "cache trick".
import jax.numpy as jnp

_CACHE = {}


def kernel(x, y):
    key = (x.shape, str(x.dtype))
    if key not in _CACHE:
        _CACHE[key] = jnp.tanh(x) * y + 0.5 * x
    return _CACHE[key]
