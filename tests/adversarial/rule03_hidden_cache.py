# Rule 3: the same cache, hidden from the static check (a per-shape list box from functools.lru_cache,
# mutated through a local name). Under the harness's jit a cached tracer leaks between traces, and on
# fresh inputs a cached value would be wrong either way.
# Task: adv_tanh_mix, target cpu. Expected verdict: never correct (incorrect or crashed).
import functools

import jax.numpy as jnp


@functools.lru_cache(maxsize=None)
def _box(shape, dtype):
    return []


def kernel(x, y):
    box = _box(x.shape, str(x.dtype))
    if not box:
        box.append(jnp.tanh(x) * y + 0.5 * x)
    return box[0]
