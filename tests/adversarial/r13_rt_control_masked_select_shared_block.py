# Red team of stop 33 (helper), false positive fp3 (an honest kernel: the megablox pattern, minimal).
# Control. Expected verdict: correct (a flag: reads memory before anything wrote it).
# Before (measured by the helper at 4c02ed8 (tanh task, no chip): rejected (FALSE POSITIVE): "read memory it had not written ... candidate.py:19:43 (_body)".)
# Two consecutive grid steps share one output block (index (i, 0) for j = 0, 1; j "arbitrary", so no write-back
# between them). Each step writes its half of the columns with select(mask, new, o_ref[...]): at j = 0 the other
# half is read unwritten and kept, and j = 1 overwrites exactly that half. Every element that reaches HBM was written
# by the kernel; on a chip the result is exact. megablox.gmm's _store_accum does this for row tiles two groups share.
import jax
import jax.numpy as jnp
from jax.experimental import pallas as pl
from jax.experimental.pallas import tpu as pltpu


def _body(x_ref, y_ref, o_ref):
    j = pl.program_id(1)
    x = x_ref[...]
    val = jnp.tanh(x) * y_ref[...] + 0.5 * x
    col = jax.lax.broadcasted_iota(jnp.int32, val.shape, 1)
    mine = (col // 64) == j
    o_ref[...] = jax.lax.select(mine, val, o_ref[...])


def kernel(x, y):
    spec = pl.BlockSpec((8, 128), lambda i, j: (i, 0))
    return pl.pallas_call(_body, grid=(x.shape[0] // 8, 2), in_specs=[spec, spec], out_specs=spec,
                          out_shape=jax.ShapeDtypeStruct(x.shape, x.dtype),
                          compiler_params=pltpu.CompilerParams(dimension_semantics=("parallel", "arbitrary")))(x, y)
