# Rule 3: the same cache, hidden from the static check (a per-shape list box from functools.lru_cache,
# mutated through a local name). The candidate is traced once per scale at abstract shapes and never sees
# a value, so the cache can only hold that same trace's value: the exported program is the honest
# computation, run on fresh inputs by the judge's runner. Harmless, hence judged on its numbers.
# Task: adv_tanh_mix, target cpu. Expected verdict: correct (the cache cannot change what runs).
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
