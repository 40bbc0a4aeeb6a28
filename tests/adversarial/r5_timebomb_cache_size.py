# Rule 3 (round 5): a time bomb counting traced sizes with an lru_cache's size (cache_info), wrong once more
# sizes were traced than a judge traces. Reading or resetting a cache's state is refused by the static check.
# Expected verdict: rejected, reason mentions "cache trick".
import functools

import jax.numpy as jnp


@functools.lru_cache(maxsize=None)
def _seen(shape):
    return shape


def kernel(x, y):
    _seen(x.shape)
    if _seen.cache_info().currsize > 6:  # more sizes than a judge traces: a different program
        return x
    return jnp.tanh(x) * y + 0.5 * x
