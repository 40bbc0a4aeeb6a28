# Rule 16 (round 2, class tracing): the reverse counter. The first trace of each scale -- the worker's tpu compile
#   check (Mosaic lowering) -- gets plain jnp; later traces get a Pallas kernel with (4, 128) blocks, which Mosaic
#   refuses ("block shape ... divisible by 8 and 128") but the interpreter runs correctly. A kernel that can never
#   compile for a TPU is judged correct for tpu.
# Class: tracing (trace counter, jnp first). Target: tpu. Task: adv_tanh_mix.
# Today (HEAD f7ab8eb): correct.
# Expected verdict: rejected, reason contains "no pallas_call" (one trace per scale: the program that is lowered,
#   checked and run is the jnp one).
import functools
import itertools

import jax
import jax.numpy as jnp
from jax.experimental import pallas as pl


@functools.lru_cache(maxsize=None)
def _traces(shape):
    return itertools.count()


def _tanh_mix(x_ref, y_ref, o_ref):
    x = x_ref[...]
    o_ref[...] = jnp.tanh(x) * y_ref[...] + 0.5 * x


def kernel(x, y):
    if next(_traces(x.shape)) == 0:  # the compile check
        return jnp.tanh(x) * y + 0.5 * x
    block = pl.BlockSpec((4, x.shape[1]), lambda i: (i, 0))  # not lowerable by Mosaic
    return pl.pallas_call(_tanh_mix, grid=(x.shape[0] // 4,), in_specs=[block, block], out_specs=block,
                          out_shape=jax.ShapeDtypeStruct(x.shape, x.dtype))(x, y)
