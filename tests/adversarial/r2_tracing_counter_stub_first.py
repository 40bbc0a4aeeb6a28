# Rule 16 (round 2, class tracing): different code for the checks and for the run. A per-shape trace counter
#   (an `itertools.count` kept by an `lru_cache` -- no global, no module-level dict for the static check to see):
#   the worker traces each scale three times (tpu compile check, jaxpr kernel check, the executable), so the first
#   two traces get a Pallas stub (a copy of x: wrong) and the executable gets plain jnp (right).
# Class: tracing (trace counter, Pallas first). Target: tpu. Task: adv_tanh_mix.
# Today (HEAD f7ab8eb): correct -- the checks saw a kernel, the cases ran jnp.
# Expected verdict: incorrect, reason contains "outside atol" (one trace per scale: the stub is what runs).
import functools
import itertools

import jax
import jax.numpy as jnp
from jax.experimental import pallas as pl


@functools.lru_cache(maxsize=None)
def _traces(shape):
    return itertools.count()


def _stub(x_ref, y_ref, o_ref):
    o_ref[...] = x_ref[...]


def kernel(x, y):
    if next(_traces(x.shape)) < 2:  # the compile check and the jaxpr check
        return pl.pallas_call(_stub, out_shape=jax.ShapeDtypeStruct(x.shape, x.dtype))(x, y)
    return jnp.tanh(x) * y + 0.5 * x  # the executable the cases (and the timing) run
